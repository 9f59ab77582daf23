import dataclasses
import json
import logging
import re
import sys

import pytest

from spade_ray.records import to_dict
from spade_ray.tracking import MetricsSink, summary_table
from spade_ray.tracking.metrics import load_metrics, wandb_payload, wandb_run_id
from spade_ray.tracking.plots import PLOTS
from tests.tracking import factories as f


@pytest.fixture(autouse=True)
def no_wandb_server(monkeypatch, tmp_path_factory):
    # Offline runs never contact a server; an unreachable base URL makes sure of it, and the
    # config and cache dirs keep W&B's files out of the home directory.
    home = tmp_path_factory.mktemp("wandb-home")
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(home))


def _sink(run_dir, **kwargs) -> MetricsSink:
    return MetricsSink(run_dir, "run", {"lr": 1e-5}, **{"wandb_mode": "disabled", **kwargs})


def test_logged_rounds_read_back_equal_from_metrics_jsonl(tmp_path):
    with _sink(tmp_path) as sink:
        sink.log(f.metrics(0))
        sink.log(f.metrics(1, pass_at_1=None))
    assert load_metrics(tmp_path / "metrics.jsonl") == [f.metrics(0), f.metrics(1, pass_at_1=None)]


def test_replaying_a_logged_round_adds_no_line(tmp_path):
    with _sink(tmp_path) as sink:
        assert sink.log(f.metrics(0)) is True
    with _sink(tmp_path) as resumed:
        assert resumed.log(f.metrics(0)) is False
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 1


def test_torn_last_line_is_cut_when_the_sink_opens(tmp_path):
    line = json.dumps(to_dict(f.metrics(0)))
    (tmp_path / "metrics.jsonl").write_text(line + "\n" + '{"run_id": "run", "rou')
    with _sink(tmp_path) as sink:
        sink.log(f.metrics(1))
    assert [m.round for m in load_metrics(tmp_path / "metrics.jsonl")] == [0, 1]


def test_corrupt_line_is_named_with_its_number(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"round": 0}\nnot json\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:1 is not a RoundMetrics line"):
        load_metrics(tmp_path / "metrics.jsonl")


def test_metrics_of_another_run_are_refused(tmp_path):
    with _sink(tmp_path) as sink, pytest.raises(ValueError, match="'other'"):
        sink.log(f.metrics(0, run_id="other"))


def test_each_log_renders_every_plot_as_png(tmp_path):
    with _sink(tmp_path) as sink:
        sink.log(f.metrics(0, pass_at_1=None))
        sink.log(f.metrics(1))
    expected = {f"{stem}.png" for stem, *_ in PLOTS} | {"stage_timings.png"}
    pngs = {p.name: p.read_bytes()[:8] for p in (tmp_path / "plots").iterdir()}
    assert pngs == dict.fromkeys(expected, b"\x89PNG\r\n\x1a\n")


def test_wandb_offline_writes_its_run_under_run_dir(tmp_path):
    with _sink(tmp_path, wandb_mode="offline") as sink:
        sink.log(f.metrics(0))
    assert list((tmp_path / "wandb").glob("offline-run-*-run/run-run.wandb"))


def test_resumed_sink_continues_the_same_wandb_run(tmp_path):
    ids = []
    for round in (0, 1):
        with _sink(tmp_path, wandb_mode="offline") as sink:
            sink.log(f.metrics(round))
            ids.append(sink.wandb_id)
    assert ids == [wandb_run_id("run")] * 2


def test_unusable_wandb_dir_warns_once_and_metrics_still_land(tmp_path, caplog):
    (tmp_path / "wandb").write_text("a file where W&B wants its directory")
    with caplog.at_level(logging.WARNING), _sink(tmp_path, wandb_mode="offline") as sink:
        sink.log(f.metrics(0))
        sink.log(f.metrics(1))
    assert len([r for r in caplog.records if "W&B" in r.getMessage()]) == 1
    assert [m.round for m in load_metrics(tmp_path / "metrics.jsonl")] == [0, 1]


def test_missing_wandb_package_warns_and_metrics_still_land(tmp_path, caplog, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` now raises ImportError
    with caplog.at_level(logging.WARNING), _sink(tmp_path, wandb_mode="offline") as sink:
        sink.log(f.metrics(0))
    assert "wandb is not installed" in caplog.text
    assert (tmp_path / "metrics.jsonl").exists()


def test_unknown_wandb_mode_is_named(tmp_path):
    with pytest.raises(ValueError, match="wandb_mode='shared'"):
        _sink(tmp_path, wandb_mode="shared")


def test_wandb_run_id_is_safe_stable_and_distinct():
    ids = [wandb_run_id("exp/a:1"), wandb_run_id("exp/a:1"), wandb_run_id("exp/a?1")]
    assert ids[0] == ids[1] != ids[2]
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", i) for i in ids)


def test_wandb_payload_carries_stages_and_rejections_and_skips_unmeasured_pass_at_1():
    payload = wandb_payload(f.metrics(0, pass_at_1=None))
    assert payload["time/solve_s"] == 8.0 and payload["rejections/no tests"] == 1
    assert "validation/pass_at_1" not in payload


def test_wandb_payload_carries_the_learner_and_its_gate_only_when_a_learner_ran():
    assert not [k for k in wandb_payload(f.metrics(0)) if k.startswith("learner/")]
    rejected = dataclasses.replace(f.metrics(1), update="rejected", learner_step=3,
                                   learner_loss=0.61, gate_pass_at_1=0.1,
                                   gate_heldout_logp=-1.25, rejected_by=("heldout_logp",))
    payload = wandb_payload(rejected)
    assert payload["learner/step"] == 3 and payload["learner/loss"] == 0.61
    assert payload["learner/rejected"] == 1.0 and payload["learner/accepted"] == 0.0
    assert payload["learner/gate_pass_at_1"] == 0.1
    assert payload["learner/gate_heldout_logp"] == -1.25


def test_summary_table_has_a_row_per_round_and_the_top_rejections():
    text = summary_table([f.metrics(1), f.metrics(0, pass_at_1=None)])
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["round", "gen_v", "sol_v", "val_pass@1"]
    assert [line.split()[0] for line in lines[2:4]] == ["0", "1"]
    assert lines[-1] == "rejections (all rounds): reference fails its tests x4, no tests x2"
