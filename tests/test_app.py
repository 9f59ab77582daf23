"""The run app's records: a run directory that holds rounds resumes only with the settings they
ran with, and only from a trace that accounts for them."""

import json

import pytest
from omegaconf import OmegaConf

from spade_ray.app import SETTINGS_FILE, check_settings, open_records
from spade_ray.config import ConfigError, TraceConfig
from spade_ray.records import to_dict
from spade_ray.tracking.trace import TraceDamaged
from tests.tracking.factories import metrics


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


def records_settings():
    cfg = settings()
    cfg.wandb = {"mode": "disabled", "project": "p", "group": None, "tags": []}
    cfg.run_name = "run"
    return cfg


def open_dir(run_dir):
    store, sink = open_records(records_settings(), TraceConfig(), run_dir, "run", 0)
    sink.close()
    store.close()


def test_a_directory_whose_trace_was_lost_is_refused_and_left_as_it_is(tmp_path):
    """Started afresh, it ran its rounds again and appended them to metrics.jsonl after the
    old ones (rounds 0, 1, 0, 1, 2), rewriting their pairs (bad-input audit s26, F2)."""
    lines = "".join(json.dumps(to_dict(metrics(r))) + "\n" for r in (0, 1))
    (tmp_path / "metrics.jsonl").write_text(lines)
    with pytest.raises(ConfigError, match=r"metrics.jsonl \(rounds 0-1\) but no trace.sqlite"):
        open_dir(tmp_path)
    assert not (tmp_path / "trace.sqlite").exists()
    assert (tmp_path / "metrics.jsonl").read_text() == lines
    (tmp_path / "metrics.jsonl").unlink()
    (tmp_path / "pairs").mkdir()
    (tmp_path / "pairs" / "round_000.jsonl").write_text("{}\n")
    with pytest.raises(ConfigError, match="holds pairs/ but no trace.sqlite"):
        open_dir(tmp_path)


def test_a_trace_with_no_round_beside_recorded_rounds_is_refused(tmp_path):
    open_dir(tmp_path)  # a start that failed before round 0 completed: an empty trace
    (tmp_path / "pairs").mkdir()  # a round 0 killed mid-way leaves these, discarded on resume
    (tmp_path / "pairs" / "round_000.jsonl").write_text("{}\n")
    open_dir(tmp_path)
    (tmp_path / "metrics.jsonl").write_text(json.dumps(to_dict(metrics(0))) + "\n")
    with pytest.raises(ConfigError, match="but a trace with no completed round"):
        open_dir(tmp_path)


def test_a_damaged_trace_is_named_and_left_as_it_is(tmp_path):
    damaged = b"SQLite format 3\x00" + bytes(range(256)) * 64
    (tmp_path / "trace.sqlite").write_bytes(damaged)
    with pytest.raises(TraceDamaged, match="trace.sqlite is damaged .* nothing was written"):
        open_dir(tmp_path)
    assert (tmp_path / "trace.sqlite").read_bytes() == damaged
