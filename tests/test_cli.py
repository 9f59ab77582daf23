"""`spade-ray sandbox exec|check`, run as a user would (the installed console script)."""

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

SPADE_RAY = str(Path(sys.executable).parent / "spade-ray")


def cli(*args, cwd=None):
    return subprocess.run([SPADE_RAY, *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env=os.environ)


def test_exec_json_prints_exactly_one_object_with_the_result_fields(tmp_path):
    program = tmp_path / "p.py"
    program.write_text("import sys; print(sys.stdin.read().upper())")
    stdin = tmp_path / "in.txt"
    stdin.write_text("hello")
    out = cli("sandbox", "exec", program, "--stdin", stdin, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)  # one object, nothing else on stdout
    assert data["status"] == "ok" and data["stdout"] == "HELLO\n"
    assert {"exit_code", "wall_s", "cpu_s", "peak_memory_mb", "env_hash", "truncated"} <= set(data)


def test_exec_timeout_flag_is_applied(tmp_path):
    program = tmp_path / "p.py"
    program.write_text("while True: pass")
    out = cli("sandbox", "exec", program, "--timeout", "1", "--json")
    assert out.returncode == 1
    assert json.loads(out.stdout)["status"] == "timeout"


def test_check_reports_per_test_outcomes(tmp_path):
    task = tmp_path / "task.json"
    task.write_text(json.dumps({"tests": ["assert inc(1) == 2", "assert inc(5) == 7"]}))
    solution = tmp_path / "s.py"
    solution.write_text("def inc(x):\n    return x + 1\n")
    out = cli("sandbox", "check", task, solution, "--json")
    assert out.returncode == 1
    data = json.loads(out.stdout)
    assert [o["outcome"] for o in data["outcomes"]] == ["passed", "failed"]
    assert data["fraction_passed"] == 0.5


def test_empty_program_is_a_named_error(tmp_path):
    program = tmp_path / "empty.py"
    program.write_text("")
    out = cli("sandbox", "exec", program)
    assert out.returncode == 2
    assert "empty" in out.stderr


def test_unknown_backend_is_a_named_error(tmp_path):
    program = tmp_path / "p.py"
    program.write_text("print(1)")
    out = cli("sandbox", "exec", program, "--backend", "podman")
    assert out.returncode == 2 and "podman" in out.stderr


@pytest.mark.docker
def test_exec_on_the_docker_backend(tmp_path):
    program = tmp_path / "p.py"
    program.write_text("import socket; print(socket.gethostname())")
    out = cli("sandbox", "exec", program, "--backend", "docker", "--json")
    if out.returncode == 2 and os.environ.get("SPADE_REQUIRE_DOCKER") != "1":
        pytest.skip(f"docker backend unavailable: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["stdout"] == "sandbox\n"
    assert data["limits_enforced_by"].startswith("docker")


@pytest.mark.slow  # a model, HumanEval and a Ray cluster: ~20-30 s
def test_eval_reports_humaneval_pass_at_1_through_the_sandbox():
    out = cli("eval", "--model", "tiny", "--problems", "2", "--tiers", "easy", "--max-tokens", "8")
    assert out.returncode == 0, out.stderr[-2000:]
    # a random model passes none
    assert "HumanEval 2 problems x1: pass@1 0.000 (pass@1 by tier: easy 0.000;" in out.stdout


@pytest.mark.parametrize("args, problem", [(["--tiers", "easy,trivial"], "unknown validation "
                                            "tiers ['trivial']"),
                                           (["--tiers", "hard", "--problems", "48"],
                                            "validation.problems must be 0..47")])
def test_eval_with_a_bad_subset_is_a_named_error(args, problem):
    out = cli("eval", "--model", "tiny", *args)
    assert out.returncode == 2 and problem in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("tiers, problems", [("easy", 57), ("hard", 47), ("", 164)])
def test_eval_without_a_subset_size_takes_every_problem_of_its_tiers(tiers, problems):
    # It took 164 whatever the tiers, so `eval --tiers easy` was refused (57 easy problems).
    from spade_ray.cli import _parser, eval_validation
    args = _parser().parse_args(["eval", "--tiers", tiers] if tiers else ["eval"])
    assert eval_validation(args).problems == problems


def test_trace_of_a_missing_run_is_a_named_error(tmp_path):
    out = cli("trace", tmp_path / "nope")
    assert out.returncode == 2 and "no trace at" in out.stderr


@pytest.mark.parametrize("sql, problem", [("SELECT * FROM generator_outputs", "no such table"),
                                          ("DELETE FROM tasks", "readonly")])
def test_a_trace_query_that_cannot_run_is_a_named_error(tmp_path, sql, problem):
    from spade_ray.tracking import TraceStore

    with TraceStore(tmp_path / "trace.sqlite", "run"):
        pass
    out = cli("trace", tmp_path, "sql", sql)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert problem in out.stderr and "the trace's tables: " in out.stderr
    assert "candidates" in out.stderr and "tasks" in out.stderr


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
@pytest.mark.parametrize("what", ["summary", "tasks"])
def test_trace_of_a_damaged_file_is_one_line_naming_it_and_the_cause(tmp_path, damage, what):
    from spade_ray.tracking import TraceStore, Versions
    from tests.tracking import factories as f

    db = tmp_path / "trace.sqlite"
    with TraceStore(db, "run") as store:
        for i in range(200):  # enough pages that half the file loses table data
            store.record_task(0, f.task(i), True, "", Versions(generator=0, solver=0))
    data = db.read_bytes()
    db.write_bytes(b"garbage" * 20 + data[140:] if damage == "garbage" else data[:len(data) // 2])
    out = cli("trace", tmp_path, what)
    cause = "file is not a database" if damage == "garbage" else "disk image is malformed"
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert f"cannot read the trace {db}: " in out.stderr and cause in out.stderr


def test_an_sqlite_error_from_any_command_is_bad_input(monkeypatch, capsys):
    from spade_ray import cli as module
    from spade_ray.tracking import diagnose

    def damaged(*_):
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(diagnose, "load_run", damaged)
    assert module.main(["diagnose", "runs/x"]) == 2
    assert capsys.readouterr().err == ("spade-ray: error: cannot read the trace: "
                                       "database disk image is malformed\n")


def test_report_writes_the_page_of_a_run(tmp_path):
    from spade_ray.records import to_dict
    from tests.tracking import factories as f

    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(to_dict(f.metrics(r))) + "\n"
                                                    for r in range(2)))
    out = cli("report", tmp_path, "--out", tmp_path / "page.html")
    assert out.returncode == 0 and "page.html" in out.stdout
    assert (tmp_path / "page.html").read_text().count("<img") >= 5


def test_report_of_a_missing_run_is_a_named_error(tmp_path):
    out = cli("report", tmp_path / "nope")
    assert out.returncode == 2 and "nope" in out.stderr


@pytest.mark.parametrize("overrides, message", [
    (["learner=none", "loop.overlap=true"], "loop.overlap=true needs a learner"),
    (["trace.max_mb=-1"], "trace.max_mb must be > 0 or null (no limit), got -1.0"),
    # OmegaConf's own errors printed their traceback (bad-input audit s26, F4)
    (["+loop.bogus=3"], "Key 'bogus' not in 'LoopConfig'"),
    (["+sandbox.bogus=1"], "Key 'bogus' not in 'SandboxConfig'"),
    (["model.roles.solver.engines=0"], "solver: engines must be >= 1, got 0"),
    (["sandbox.backend=bogus"], "sandbox.backend='bogus': use one of ['local', 'docker']"),
    (["sandbox.workers=-2"], "sandbox.workers must be >= 1 or null (one per CPU), got -2"),
    (["learner=dpo", "learner.params.lr=abc"],
     "learner lr must be a finite number > 0.0, got 'abc'"),
])
def test_run_with_a_bad_setting_is_a_one_line_error(tmp_path, overrides, message):
    out = cli("run", "experiment=cpu_tiny", *overrides, f"run_root={tmp_path}",
              "wandb.mode=disabled")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().startswith(f"spade-ray: error: {message}")
    assert len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "cpu_tiny" / "trace.sqlite").exists()  # refused before anything ran
