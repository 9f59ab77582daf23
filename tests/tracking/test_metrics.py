import dataclasses
import json
import logging
import re
import sys
import time

import pytest

from spade_ray.records import GateSignal, UpdateStatus, WarmStart, to_dict
from spade_ray.tasks.guesses import null_solvers
from spade_ray.tasks.static import static_reason
from spade_ray.tracking import MetricsSink, TraceStore, Versions, summary_table
from spade_ray.tracking.metrics import (
    load_metric_rows,
    load_metrics,
    rejection_label,
    wandb_payload,
    wandb_run_id,
)
from spade_ray.tracking.plots import round_charts
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
    expected = {f"{chart.stem}.png" for chart in round_charts([])}
    pngs = {p.name: p.read_bytes()[:8] for p in (tmp_path / "plots").iterdir()}
    assert pngs == dict.fromkeys(expected, b"\x89PNG\r\n\x1a\n")


def test_wandb_offline_writes_its_run_under_run_dir(tmp_path):
    with _sink(tmp_path, wandb_mode="offline") as sink:
        sink.log(f.metrics(0))
    assert list((tmp_path / "wandb").glob("offline-run-*-run/run-run.wandb"))


def test_closing_the_sink_logs_the_sample_tasks_as_a_wandb_table(tmp_path):
    with TraceStore(tmp_path / "trace.sqlite", "run") as store:
        store.record_task(0, f.task(0), True, "", Versions(1, 1))
        store.record_candidates(0, [f.candidate("t0", 0)], Versions(1, 1))
        store.record_scores(0, [f.score("t0/0")], Versions(1, 1))
    with _sink(tmp_path, wandb_mode="offline") as sink:
        sink.log(f.metrics(0))
    (table,) = (tmp_path / "wandb").glob("offline-run-*/files/media/table/samples/tasks_*.json")
    data = json.loads(table.read_text())
    assert data["columns"][:2] == ["round", "task_id"] and data["data"][0][:2] == [0, "t0"]


def test_an_unreadable_trace_costs_the_table_only(tmp_path, caplog):
    (tmp_path / "trace.sqlite").write_text("not a database")
    with caplog.at_level(logging.WARNING), _sink(tmp_path, wandb_mode="offline") as sink:
        sink.log(f.metrics(0))
    assert "could not log sample tasks to W&B" in caplog.text
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
                                   gate_heldout_logp=-1.25, rejected_by=("heldout_logp",),
                                   learner_stats=(("clip_fraction", 0.125), ("kl", 0.01)))
    payload = wandb_payload(rejected)
    assert (payload["learner/clip_fraction"], payload["learner/kl"]) == (0.125, 0.01)
    assert payload["learner/step"] == 3 and payload["learner/loss"] == 0.61
    assert payload["learner/rejected"] == 1.0 and payload["learner/accepted"] == 0.0
    assert payload["learner/gate_pass_at_1"] == 0.1
    assert payload["learner/gate_heldout_logp"] == -1.25


def test_wandb_payload_carries_pairs_per_role_families_and_every_gate_decision():
    buffering = dataclasses.replace(f.metrics(0), update="buffering", generator_pairs=4,
                                    family_tasks=(("codegen", 2), ("repair", 1)))
    rejected = dataclasses.replace(f.metrics(1), update="rejected",
                                   rejected_by=("pass_at_1", "heldout_logp"))
    payload = wandb_payload(buffering)
    assert payload["pairs/solver"] == 7 and payload["pairs/generator"] == 4
    assert payload["tasks/family/codegen"] == 2 and payload["learner/buffering"] == 1.0
    assert {k for k in wandb_payload(rejected) if k.startswith("learner/rejected_by/")} == {
        "learner/rejected_by/pass_at_1", "learner/rejected_by/heldout_logp"}


def test_wandb_payload_carries_the_control_fields_a_round_has():
    control = dataclasses.replace(
        f.metrics(0), validation_tiers=(("easy", 0.5), ("hard", 0.125)),
        difficulty_band=(0.3, 0.7), task_diversity=0.8, generator_difficulty=0.4,
        topic_tasks=(("lists", 3),), collapse_alarm=("diversity_low",), generator_rollback=2,
        control_level=-1, solver_hints=4)
    payload = wandb_payload(control)
    assert payload["tasks/control_level"] == -1 and payload["tasks/solver_hints"] == 4
    assert payload["validation/easy/pass_at_1"] == 0.5
    assert payload["validation/hard/pass_at_1"] == 0.125
    assert (payload["tasks/difficulty_band_low"], payload["tasks/difficulty_band_high"]) == (
        0.3, 0.7)
    assert payload["tasks/diversity"] == 0.8 and payload["tasks/generator_difficulty"] == 0.4
    assert payload["tasks/topic/lists"] == 3
    assert payload["collapse/alarm"] == 1.0 and payload["collapse/rollback_version"] == 2
    quiet = wandb_payload(f.metrics(0))
    assert quiet["collapse/alarm"] == 0.0
    assert not {"tasks/diversity", "tasks/difficulty_band_low", "collapse/rollback_version",
                "tasks/control_level", "tasks/solver_hints"} & set(quiet)


def test_wandb_payload_carries_the_warm_start_in_round_0_only():
    warm = WarmStart(demonstrations=8, generator_demonstrations=2, epochs=1, steps=2, loss=1.5,
                     update=UpdateStatus.REJECTED, pass_at_1_before=0.5, pass_at_1_after=0.25,
                     heldout_logp_before=-1.0, heldout_logp_after=-1.2,
                     rejected_by=(GateSignal.PASS_AT_1,), wall_s=3.0)
    payload = wandb_payload(dataclasses.replace(f.metrics(0), warm_start=warm))
    assert (payload["warm_start/accepted"], payload["warm_start/steps"],
            payload["warm_start/pass_at_1"]) == (0.0, 2, 0.25)
    assert not any(key.startswith("warm_start/") for key in wandb_payload(f.metrics(1)))


# Each series of the report's charts (plots.round_charts) and the W&B key that mirrors it.
_WANDB_KEYS = {
    ("validation_pass_at_1", "pass@1"): "validation/pass_at_1",
    ("valid_task_rate", "admitted / proposed"): "tasks/valid_rate",
    ("new_task_pass_rate", "pass rate"): "tasks/new_task_pass_rate",
    ("mean_difficulty", "all tasks"): "tasks/mean_difficulty",
    ("mean_difficulty", "generated tasks"): "tasks/generator_difficulty",
    ("diversity", "candidates"): "candidates/diversity", ("diversity", "tasks"): "tasks/diversity",
    ("pairs", "solver"): "pairs/solver", ("pairs", "generator"): "pairs/generator",
    ("learner_loss", "loss"): "learner/loss", ("stage_timings", "round total"): "time/round_s",
    ("tokens", "generator"): "tokens/generator", ("tokens", "solver"): "tokens/solver",
    ("sandbox_cpu_s", "sandbox"): "sandbox/cpu_s",
}
_WANDB_LABELLED = {"validation_pass_at_1": "validation/{}/pass_at_1", "stage_timings": "time/{}_s",
                   "family_tasks": "tasks/family/{}", "topic_tasks": "tasks/topic/{}"}


def test_wandb_payload_mirrors_every_series_of_the_report():
    m = dataclasses.replace(
        f.metrics(0), update="accepted", learner_loss=0.5, generator_pairs=2,
        family_tasks=(("codegen", 2),), topic_tasks=(("lists", 2),),
        validation_tiers=(("easy", 0.5),), task_diversity=0.8, generator_difficulty=0.4)
    payload = wandb_payload(m)
    for chart in round_charts([to_dict(m)]):
        for series in chart.series:
            if chart.stem == "gate":  # a 0/1 key per decision of a learner that ran
                if series.label != "none":
                    assert payload[f"learner/{series.label}"] == float(bool(series.points))
                continue
            key = _WANDB_KEYS.get((chart.stem, series.label)) or _WANDB_LABELLED[
                chart.stem].format(series.label)
            assert [(0, payload[key])] == list(series.points), (chart.stem, series.label)


def test_metric_rows_keep_fields_this_version_does_not_know(tmp_path):
    line = {**to_dict(f.metrics(0)), "from_the_future": [1]}
    (tmp_path / "metrics.jsonl").write_text(json.dumps(line) + "\n" + '{"round": "x"}\n')
    assert load_metric_rows(tmp_path / "metrics.jsonl") == [line]


@pytest.mark.parametrize("reference, kind", [
    ("def f(x):\n    return x + ǅ0ﬁ_payload\n", "unbound"),
    ("def f(x):\n    import socket\n    return x\n", "forbidden"),
    ("def f(x):\n    return x.__class__\n", "forbidden"),
    ("def f(x):\n    return '__my_own_name__'\n", "forbidden"),
])
def test_a_reason_naming_what_the_model_wrote_is_counted_under_its_kind(reference, kind):
    reason = static_reason(reference)
    assert reason.startswith(f"{kind}:") and rejection_label(reason) == kind


def test_a_guess_named_after_a_parameter_is_counted_without_the_name():
    echoes = [f"trivial_passes:{name}" for name in null_solvers("def f(secret, other):")
              if name.startswith("echo_")]
    assert {rejection_label(r) for r in [*echoes, "trivial_passes:item_secret"]} == {
        "trivial_passes:echo", "trivial_passes:item"}


@pytest.mark.parametrize("reason", ["module_code", "trivial_passes:lookup",
                                    "trivial_passes:few_valued", "trivial_passes:always_equal",
                                    "signature:default", "validation_twin:HumanEval/3",
                                    "stage_failed:solve:RuntimeError"])
def test_our_own_fixed_reasons_are_counted_as_they_are(reason):
    assert rejection_label(reason) == reason


def test_summary_table_has_a_row_per_round_and_the_top_rejections():
    text = summary_table([f.metrics(1), f.metrics(0, pass_at_1=None)])
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["round", "gen_v", "sol_v", "val_pass@1"]
    assert [line.split()[0] for line in lines[2:4]] == ["0", "1"]
    assert lines[-1] == "rejections (all rounds): reference fails its tests x4, no tests x2"


def wandb_records(path):
    """The protobuf records of an offline W&B run file: ':W&B' + magic + version, then a
    LevelDB-style log (32 KiB blocks; each chunk: crc32c, length, type FULL/FIRST/MIDDLE/LAST)
    of wandb_internal_pb2.Record. wandb 0.31 reads it in Go only, so the test reads it here
    the way `wandb sync` will."""
    from wandb.proto.wandb_internal_pb2 import Record

    data, pos, block, records, pending = path.read_bytes(), 7, 32768, [], b""
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # FULL, LAST
            records.append(Record.FromString(pending + chunk))
            pending = b""
        elif kind in (2, 3):  # FIRST, MIDDLE
            pending += chunk
    return records


def test_the_offline_wandb_run_parses_and_carries_group_tags_and_the_whole_config(tmp_path):
    config = {"loop": {"seed": 3, "candidates": 4}, "learner": {"name": "dpo"}}
    with MetricsSink(tmp_path, "run", config, wandb_mode="offline", wandb_group="sweep-a",
                     wandb_tags=("cpu_tiny", "seed=3")) as sink:
        sink.log(f.metrics(0))
    (path,) = (tmp_path / "wandb").glob("offline-run-*-run/run-run.wandb")
    deadline = time.monotonic() + 60  # wandb-core, a separate process, may still be writing
    while not any(r.WhichOneof("record_type") == "exit" for r in wandb_records(path)):
        assert time.monotonic() < deadline, f"{path} has no exit record after 60 s"
        time.sleep(0.2)
    records = wandb_records(path)
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (run.run_id, run.display_name, run.run_group, list(run.tags)) == (
        wandb_run_id("run"), "run", "sweep-a", ["cpu_tiny", "seed=3"])
    logged = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert {k: v for k, v in logged.items() if k in config} == config
    history = [r.history for r in records if r.WhichOneof("record_type") == "history"]
    keys = {i.key or "/".join(i.nested_key) for i in history[0].item}
    assert {"validation/pass_at_1", "tasks/valid", "pairs/generator"} <= keys
