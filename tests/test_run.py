"""`spade-ray run` end to end with the tiny model (every stage real), and resume after kill -9."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each test is a whole `spade-ray run`: 20-45 s

SPADE_RAY = str(Path(sys.executable).parent / "spade-ray")


def run_cmd(run_root, *overrides):
    return [SPADE_RAY, "run", "experiment=cpu_tiny", f"run_root={run_root}", "wandb.mode=offline",
            *overrides]


def metrics_rounds(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["round"] for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    out = subprocess.run(run_cmd(root), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return root / "cpu_tiny", out.stdout


def test_each_round_prints_its_figures_and_a_summary_ends_the_run(tiny_run):
    _, stdout = tiny_run
    assert "round 0: val pass@1" in stdout and "round 1: val pass@1" in stdout
    assert "rejections (all rounds)" in stdout


def test_run_directory_holds_trace_pairs_metrics_plots_and_wandb(tiny_run):
    run_dir, _ = tiny_run
    assert metrics_rounds(run_dir) == [0, 1]
    assert (run_dir / "pairs" / "round_001.jsonl").exists()
    assert (run_dir / "pairs" / "round_001" / "dataset_info.json").exists()
    assert list((run_dir / "plots").glob("*.png"))
    assert (run_dir / "wandb").is_dir()


def test_every_candidate_is_traced_with_its_score_and_versions(tiny_run):
    run_dir, _ = tiny_run
    db = sqlite3.connect(run_dir / "trace.sqlite")
    candidates = db.execute("SELECT COUNT(*) FROM candidates").fetchone()[0]
    scores = db.execute("SELECT COUNT(*) FROM scores").fetchone()[0]
    executions = db.execute("SELECT COUNT(*) FROM executions").fetchone()[0]
    assert candidates > 0 and candidates == scores == executions
    versions = db.execute("SELECT DISTINCT generator_version, solver_version FROM candidates")
    assert versions.fetchall() == [(0, 0)]


def test_malformed_generator_output_is_counted_not_fatal(tiny_run):
    run_dir, _ = tiny_run
    rounds = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all(r["tasks_proposed"] == 8 for r in rounds)  # 4 prompts, 2 outputs each
    reasons = {reason for r in rounds for reason, _ in r["rejection_reasons"]}
    assert reasons and reasons <= {"missing_section", "reference_syntax", "no_function",
                                   "no_inputs", "too_few_inputs", "input_calls_unknown_function",
                                   "input_arity"}
    db = sqlite3.connect(run_dir / "trace.sqlite")
    rows = db.execute("SELECT family, outcome, reward FROM generator_inputs").fetchall()
    assert len(rows) == 16 and {f for f, _, _ in rows} == {"codegen", "repair", "predict"}
    assert all(reward == -1.0 for _, _, reward in rows)  # none is a task: the worst reward


def test_a_resume_with_other_settings_is_refused_and_changes_nothing(tiny_run):
    run_dir, _ = tiny_run
    before = {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir()}
    out = subprocess.run(run_cmd(run_dir.parent, "loop.candidates=2"), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode != 0
    assert "loop.candidates: 3 -> 2" in out.stderr and "run_name=NAME" in out.stderr
    assert {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir()
            if p.name not in ("trace.sqlite-wal", "trace.sqlite-shm")} == {
        k: v for k, v in before.items() if k not in ("trace.sqlite-wal", "trace.sqlite-shm")}


@pytest.mark.parametrize("overrides", [[], ["learner=dpo", "loop.overlap=true"]],
                         ids=["collect-only", "dpo-overlap"])
def test_resume_after_kill_9_loses_and_duplicates_nothing(tmp_path, overrides):
    cmd = run_cmd(tmp_path, "loop.rounds=3", *overrides)
    run_dir = tmp_path / "cpu_tiny"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 300
    while metrics_rounds(run_dir) == [] and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # mid-round 1, Ray and the sandbox included
    proc.wait()
    done_before = metrics_rounds(run_dir)
    assert done_before and done_before[-1] < 2
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert metrics_rounds(run_dir) == [0, 1, 2]
    db = sqlite3.connect(run_dir / "trace.sqlite")
    per_round = dict(db.execute("SELECT round, COUNT(*) FROM candidates GROUP BY round"))
    assert len(set(per_round.values())) == 1  # every round has its full, single set of rows
    assert db.execute("SELECT COUNT(*) FROM rounds").fetchone()[0] == 3


@pytest.mark.parametrize("ranks", [1, 2])
def test_dpo_rounds_start_a_learner_and_checkpoint_it(tmp_path, ranks):
    # two data-parallel ranks: DeepSpeed, half a CPU each so that they fit the 2-CPU machine
    several = ["learner.ranks=2", "learner.cpus=0.5",
               "learner.params.deepspeed_config=conf/deepspeed/zero2.json"] if ranks > 1 else []
    out = subprocess.run(run_cmd(tmp_path, "learner=dpo", "loop.rounds=1", *several),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run_dir = tmp_path / "cpu_tiny"
    metrics = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    # the random tiny model's candidates all score 0: no pairs, so the learner only buffers
    assert metrics["update"] == "buffering" and metrics["learner_step"] == 0
    checkpoint = run_dir / "checkpoints" / "step_000000"
    assert checkpoint.is_dir()
    assert json.loads((checkpoint / "learner.json").read_text())["world_size"] == ranks
    assert [(checkpoint / f"rng.rank{r}.pt").is_file() for r in range(1, ranks)] == \
        [True] * (ranks - 1)


def test_an_sft_warm_start_runs_before_round_0_and_is_recorded_with_it(tmp_path):
    out = subprocess.run(run_cmd(tmp_path, "learner=dpo", "loop.rounds=2",
                                 "learner.sft_warmup={epochs: 1}"),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("sft warm start: ") == 1
    rows = [json.loads(line) for line in
            (tmp_path / "cpu_tiny" / "metrics.jsonl").read_text().splitlines()]
    warm = rows[0]["warm_start"]
    assert warm["steps"] > 0 and warm["generator_demonstrations"] > 0
    assert warm["update"] in ("accepted", "rejected") and rows[1]["warm_start"] is None
    if warm["update"] == "accepted":  # the rounds were served the warm-started weights
        assert rows[0]["solver_version"] == 1 and rows[0]["learner_step"] >= warm["steps"]
