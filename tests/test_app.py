"""The run app's settings check: a run directory that holds rounds resumes only with the settings
they ran with."""

import json

import pytest
from omegaconf import OmegaConf

from spade_ray.app import SETTINGS_FILE, check_settings
from spade_ray.config import ConfigError


def settings(**loop):
    return OmegaConf.create({"experiment_name": "cpu_tiny", "run_root": "runs",
                             "resume_check": True, "wandb": {"mode": "offline"},
                             "loop": {"rounds": 2, "candidates": 2, "seed": 0, **loop},
                             "learner": {"params": {"beta": 0.1, "lora": {"rank": 8}}}})


def test_a_first_start_records_its_settings(tmp_path):
    check_settings(settings(), tmp_path, resumed=False)
    recorded = json.loads((tmp_path / SETTINGS_FILE).read_text())
    assert recorded["loop.candidates"] == 2 and recorded["learner.params.lora.rank"] == 8


def test_a_resume_may_run_longer_and_log_elsewhere(tmp_path):
    check_settings(settings(), tmp_path, resumed=False)
    longer = settings(rounds=5)
    longer.wandb.mode = "disabled"
    longer.run_root = "/elsewhere"
    check_settings(longer, tmp_path, resumed=True)
    assert json.loads((tmp_path / SETTINGS_FILE).read_text())["loop.rounds"] == 5


@pytest.mark.parametrize("change, key", [
    (lambda c: c.loop.update(candidates=8), "loop.candidates: 2 -> 8"),
    (lambda c: c.learner.params.lora.update(rank=16), "learner.params.lora.rank: 8 -> 16"),
    (lambda c: c.loop.update(families=["codegen"]), "loop.families: None -> ['codegen']"),
    (lambda c: c.update(experiment_name="cpu_gemma"), "experiment_name"),
])
def test_a_resume_with_other_settings_is_refused_naming_them(tmp_path, change, key):
    check_settings(settings(), tmp_path, resumed=False)
    other = settings()
    change(other)
    with pytest.raises(ValueError, match="run_name=NAME") as e:
        check_settings(other, tmp_path, resumed=True)
    assert key in str(e.value)
    assert json.loads((tmp_path / SETTINGS_FILE).read_text())["loop.candidates"] == 2


def test_resume_check_false_resumes_with_the_new_settings(tmp_path):
    check_settings(settings(), tmp_path, resumed=False)
    other = settings(candidates=8)
    other.resume_check = False
    check_settings(other, tmp_path, resumed=True)
    assert json.loads((tmp_path / SETTINGS_FILE).read_text())["loop.candidates"] == 8


def test_a_directory_with_no_completed_round_takes_the_new_settings(tmp_path):
    check_settings(settings(), tmp_path, resumed=False)  # a start that failed before round 0
    check_settings(settings(candidates=8), tmp_path, resumed=False)
    assert json.loads((tmp_path / SETTINGS_FILE).read_text())["loop.candidates"] == 8


def test_a_corrupt_settings_file_is_named(tmp_path):
    check_settings(settings(), tmp_path, resumed=False)
    (tmp_path / SETTINGS_FILE).write_text('{"loop.\x01')
    with pytest.raises(ConfigError, match=f"{tmp_path / SETTINGS_FILE} is not readable JSON"):
        check_settings(settings(), tmp_path, resumed=True)
