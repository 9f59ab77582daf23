"""`spade-ray diagnose`: small run directories written by a real TraceStore, one defect each."""

import dataclasses
import hashlib
import json
import sqlite3

import pytest

from spade_ray import cli
from spade_ray.evaluation import score
from spade_ray.records import (
    CheckResult,
    ExecStatus,
    PreferencePair,
    Role,
    RoundState,
    TestOutcome,
    to_dict,
)
from spade_ray.tracking import TraceStore, Versions
from spade_ray.tracking.diagnose import CheckName, FailureClass, Level, classify, diagnose, load_run
from tests.tracking import factories as f

V = Versions(generator=0, solver=0)
PASSES, FAILS = "def f(x):\n    return x\n", "def f(x):\n    return x + 1\n"  # f(1) == 1


def candidate(index: int, code: str = PASSES):
    return dataclasses.replace(f.candidate("t0", index), code=code)


def record(store: TraceStore, round: int, candidates, checks) -> None:
    store.record_candidates(round, candidates, V)
    store.record_executions(round, [(c.candidate_id, c.task_id, ch)
                                    for c, ch in zip(candidates, checks)], V)
    store.record_scores(round, [score(c, ch) for c, ch in zip(candidates, checks)], V)


def solver_pair(chosen: int, rejected: int, chosen_score: float, rejected_score: float,
                texts: tuple[int, int] | None = None) -> PreferencePair:
    """A pair of candidates t0/<chosen> > t0/<rejected>; `texts` reuses other candidates' text."""
    text_of = texts or (chosen, rejected)
    return dataclasses.replace(f.pair(), chosen=f"code {text_of[0]}",
                               rejected=f"code {text_of[1]}", chosen_candidate_id=f"t0/{chosen}",
                               rejected_candidate_id=f"t0/{rejected}", chosen_score=chosen_score,
                               rejected_score=rejected_score)


@pytest.fixture
def run_dir(tmp_path):
    """A healthy round: one admitted output, one rejected; a passing and a failing candidate;
    one solver pair and one generator pair that agree with their records."""
    rejected = dataclasses.replace(f.generator_input(1, "no task here"), outcome="missing_section",
                                   task_id=None, executed=False, pass_rate=None, reward=-1.0)
    with TraceStore(tmp_path / "trace.sqlite", "run") as store:
        store.record_generator_inputs(0, [f.generator_input(0), rejected], V)
        store.record_task(0, f.task(0), True, "", V)
        record(store, 0, [candidate(0), candidate(1, FAILS)], [f.check(), f.check(passed=False)])
        store.record_pairs(0, [solver_pair(0, 1, 1.0, 0.0), dataclasses.replace(
            f.pair(), prompt="Write a task", chosen="TASK ...", rejected="no task here",
            chosen_candidate_id="generator/r0/0", rejected_candidate_id="generator/r0/1",
            chosen_score=1.0, rejected_score=-1.0, role=Role.GENERATOR)], V)
        store.complete_round(0, f.metrics(0, run_id="run"), RoundState())
    return tmp_path


def failing(run_dir) -> set[CheckName]:
    d = diagnose(load_run(run_dir))
    return {c.name for c in d.checks if c.level is Level.FAIL}


def test_a_healthy_run_passes_every_check_and_exits_0(run_dir, capsys):
    assert failing(run_dir) == set()
    assert cli.main(["diagnose", str(run_dir)]) == 0
    assert "verdict: OK" in capsys.readouterr().out


def test_json_output_is_one_object_with_the_exit_code(run_dir, capsys):
    assert cli.main(["diagnose", str(run_dir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["exit_code"] == 0 and [s["key"] for s in data["sections"]] == [
        "tasks", "candidates", "environment", "evaluator", "training"]


def test_the_sections_count_what_the_trace_holds(run_dir):
    d = diagnose(load_run(run_dir))
    assert (d.section("tasks").count("admitted"), d.section("tasks").count("missing_section"),
            d.section("tasks").count("valid")) == (1, 1, 1)
    assert (d.section("training").count("solver pairs"),
            d.section("training").count("generator pairs")) == (1, 1)


def test_outputs_rejected_for_names_they_wrote_are_one_count_whose_examples_name_them(
        tmp_path):
    outputs = [dataclasses.replace(f.generator_input(i), outcome=f"unbound:name{i}",
                                   task_id=None) for i in range(5)]
    with TraceStore(tmp_path / "trace.sqlite", "run") as store:
        store.record_generator_inputs(0, outputs, V)
    (count,) = diagnose(load_run(tmp_path)).section("tasks").counts
    assert (count.label, count.count) == ("unbound", 5)
    assert [e.excerpt.split(":", 2)[:2] for e in count.examples] == [
        ["[codegen] unbound", "name0"], ["[codegen] unbound", "name1"]]


def test_a_tampered_score_fails_evaluator_consistency_and_exits_1(run_dir, capsys):
    with sqlite3.connect(run_dir / "trace.sqlite") as db:
        db.execute("UPDATE scores SET passed=0 WHERE candidate_id='t0/0'")
    assert failing(run_dir) == {CheckName.RESCORE}
    assert cli.main(["diagnose", str(run_dir)]) == 1
    assert "FAIL  re-scored executions match the scores" in capsys.readouterr().out


def test_a_pair_whose_chosen_side_ranks_lower_fails(run_dir):
    with TraceStore(run_dir / "trace.sqlite", "run") as store:
        store.record_pairs(0, [solver_pair(1, 0, 0.0, 1.0)], V)
    assert failing(run_dir) == {CheckName.PAIR_ORDER}


def test_an_efficiency_win_with_equal_values_is_a_valid_pair(run_dir):
    with TraceStore(run_dir / "trace.sqlite", "run") as store:
        slow = f.check()
        slow = dataclasses.replace(slow, execution=dataclasses.replace(slow.execution, cpu_s=2.0))
        record(store, 0, [candidate(2)], [slow])
        store.record_pairs(0, [solver_pair(0, 2, 1.0, 1.0)], V)  # 0.0625 s beats 2 s of CPU
    assert failing(run_dir) == set()


def test_a_pair_score_that_differs_from_its_record_fails(run_dir):
    with sqlite3.connect(run_dir / "trace.sqlite") as db:
        db.execute("UPDATE pairs SET rejected_score=-0.5 WHERE role='generator'")
    assert failing(run_dir) == {CheckName.PAIR_SCORES}


def test_a_duplicate_pair_in_one_round_fails(run_dir):
    with TraceStore(run_dir / "trace.sqlite", "run") as store:
        record(store, 0, [candidate(2)], [f.check()])
        store.record_pairs(0, [solver_pair(2, 1, 1.0, 0.0, texts=(0, 1))], V)  # as t0/0 > t0/1
    d = diagnose(load_run(run_dir))
    assert d.check(CheckName.DUPLICATES).level is Level.FAIL
    assert d.section("training").count("duplicate pairs") == 1


def test_a_pair_repeated_in_a_later_round_is_a_warning(run_dir):
    with TraceStore(run_dir / "trace.sqlite", "run") as store:
        record(store, 1, [candidate(0), candidate(1, FAILS)], [f.check(), f.check(passed=False)])
        store.record_pairs(1, [solver_pair(0, 1, 1.0, 0.0)], V)
    d = diagnose(load_run(run_dir))
    assert d.check(CheckName.DUPLICATES).level is Level.WARN and d.exit_code == 0


def crafted(status: ExecStatus = ExecStatus.ERROR, stderr: str = "", outcome: str = "",
            message: str = "", suspicion: str = "") -> CheckResult:
    base = f.check(passed=False)
    outcomes = (TestOutcome("example[0]", outcome, message, 0.001),) if outcome else ()
    return dataclasses.replace(base, outcomes=outcomes, suspicion=suspicion,
                               execution=dataclasses.replace(base.execution, status=status,
                                                             stderr=stderr, attempts=2))


CLASSES = {
    FailureClass.PASSED: f.check(),
    FailureClass.WRONG_ANSWER: crafted(ExecStatus.OK, outcome="failed", message="differs"),
    FailureClass.SYNTAX_ERROR: crafted(stderr='  File "solution.py", line 2\n    x\n'
                                              "IndentationError: unexpected indent\n"),
    FailureClass.RUNTIME_ERROR: crafted(stderr="Traceback ...\nNameError: name 'g' is not "
                                               "defined\n"),
    FailureClass.TIMEOUT: crafted(ExecStatus.TIMEOUT),
    FailureClass.MEMORY_LIMIT: crafted(ExecStatus.MEMORY_LIMIT),
    FailureClass.OUTPUT_LIMIT: crafted(ExecStatus.OUTPUT_LIMIT),
    FailureClass.KILLED: crafted(ExecStatus.KILLED),
    FailureClass.SANDBOX_ERROR: crafted(ExecStatus.SANDBOX_ERROR),
    FailureClass.SUSPECTED_HACK: crafted(ExecStatus.OK, outcome="failed", suspicion="read fd 3"),
}


@pytest.mark.parametrize("expected", list(CLASSES))
def test_classify_names_each_failure_class(expected):
    assert classify(CLASSES[expected]) is expected


@pytest.mark.parametrize("check, expected", [
    (crafted(ExecStatus.OK, outcome="error", message="SyntaxError: invalid syntax"),
     FailureClass.SYNTAX_ERROR),  # a predict answer that is no literal
    (crafted(ExecStatus.OK, outcome="error", message="ZeroDivisionError: division by zero"),
     FailureClass.RUNTIME_ERROR),  # the candidate raised inside a test
])
def test_classify_reads_the_test_outcomes_too(check, expected):
    assert classify(check) is expected


def test_the_candidates_section_counts_each_class_from_execution_rows(tmp_path):
    candidates = [candidate(i) for i in range(len(CLASSES))]
    with TraceStore(tmp_path / "trace.sqlite", "run") as store:
        store.record_task(0, f.task(0), True, "", V)
        record(store, 0, candidates, list(CLASSES.values()))
    section = diagnose(load_run(tmp_path)).section("candidates")
    assert {c.label: c.count for c in section.counts} == {k.value: 1 for k in CLASSES}
    assert section.counts[0].examples[0].id == "t0/9"  # the suspected hack comes first


def test_a_sandbox_error_never_rerun_fails(tmp_path):
    never = crafted(ExecStatus.SANDBOX_ERROR)
    never = dataclasses.replace(never, execution=dataclasses.replace(never.execution, attempts=1))
    with TraceStore(tmp_path / "trace.sqlite", "run") as store:
        record(store, 0, [candidate(0)], [never])
    assert failing(tmp_path) == {CheckName.SANDBOX_ERRORS}


def test_an_env_hash_change_between_rounds_is_a_warning(run_dir):
    moved = f.check()
    moved = dataclasses.replace(moved, execution=dataclasses.replace(moved.execution,
                                                                     env_hash="e2"))
    with TraceStore(run_dir / "trace.sqlite", "run") as store:
        record(store, 1, [candidate(0)], [moved])
    assert diagnose(load_run(run_dir)).check(CheckName.ENV_STABLE).level is Level.WARN


def write_metrics(run_dir, *rows) -> None:
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(to_dict(m)) + "\n" for m in rows))


def test_metrics_of_each_completed_round_of_this_run_pass(run_dir):
    write_metrics(run_dir, f.metrics(0, run_id="run"))
    check = diagnose(load_run(run_dir)).check(CheckName.METRICS_MATCH)
    assert check.level is Level.OK


def test_metrics_of_another_run_beside_the_trace_are_a_warning_naming_both(run_dir):
    write_metrics(run_dir, f.metrics(0, run_id="other"), f.metrics(1, run_id="other"))
    d = diagnose(load_run(run_dir))
    check = d.check(CheckName.METRICS_MATCH)
    assert check.level is Level.WARN and "'other'" in check.why and "'run'" in check.why
    assert d.metrics == ()  # the other run's rows are not read as this run's


def test_a_completed_round_without_its_metrics_line_is_a_warning(run_dir):
    check = diagnose(load_run(run_dir)).check(CheckName.METRICS_MATCH)
    assert check.level is Level.WARN and "round(s) 0" in check.why


@pytest.mark.parametrize("where", ["nope", "empty"])
def test_a_missing_run_dir_or_trace_exits_2_naming_it(tmp_path, capsys, where):
    (tmp_path / "empty").mkdir()
    assert cli.main(["diagnose", str(tmp_path / where)]) == 2
    assert str(tmp_path / where) in capsys.readouterr().err


def test_a_valid_trace_in_a_directory_that_refuses_its_shm_file_is_diagnosed(run_dir,
                                                                             monkeypatch):
    with f.shm_refused(run_dir, monkeypatch):
        trace = load_run(run_dir)
    assert trace.run_id == "run" and trace.completed == (0,)


def test_a_trace_that_cannot_be_read_is_named_with_the_cause_not_called_no_trace(tmp_path,
                                                                                  capsys):
    (tmp_path / "trace.sqlite").write_bytes(b"garbage" * 20)
    assert cli.main(["diagnose", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"cannot read the trace {tmp_path / 'trace.sqlite'}: file is not a database" in err


def _set_schema(run_dir, version: int) -> None:
    with sqlite3.connect(run_dir / "trace.sqlite") as db:
        if version <= 4:  # undo schema.MIGRATIONS[4]
            db.execute("ALTER TABLE scores DROP COLUMN codec_cpu_s")
            db.execute("ALTER TABLE scores DROP COLUMN codec_mb")
        if version == 3:  # undo schema.MIGRATIONS[3]
            db.execute("ALTER TABLE tasks DROP COLUMN most_shown")
            db.execute("ALTER TABLE candidates DROP COLUMN draws")
        db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(version),))
    db.close()


def test_an_older_trace_is_diagnosed_through_the_migrations_leaving_the_file_as_it_was(
        run_dir, capsys):
    _set_schema(run_dir, 3)
    before = hashlib.sha256((run_dir / "trace.sqlite").read_bytes()).hexdigest()
    assert cli.main(["diagnose", str(run_dir)]) == 0
    assert "trace schema v3; read through the migrations to v5" in capsys.readouterr().err
    assert hashlib.sha256((run_dir / "trace.sqlite").read_bytes()).hexdigest() == before
    assert [c.draws for _, c in load_run(run_dir).candidates] == [1, 1]


def test_trace_and_report_of_an_older_trace_say_which_schema_they_read_it_as(run_dir,
                                                                           tmp_path, capsys):
    """They read the file as written (no migration): a v3 trace was read without a word."""
    _set_schema(run_dir, 3)
    note = "trace schema v3; this code writes v5. It is read as written"
    assert cli.main(["trace", str(run_dir), "summary"]) == 0
    assert note in capsys.readouterr().err
    assert cli.main(["report", str(run_dir), "--out", str(tmp_path / "r.html")]) == 0
    assert note in (tmp_path / "r.html").read_text()
    _set_schema(run_dir, 5)
    assert cli.main(["trace", str(run_dir), "summary"]) == 0
    assert "schema" not in capsys.readouterr().err


@pytest.mark.parametrize("version, advice", [
    (9, "this code reads v5: a newer spade-ray wrote it, diagnose it with that version"),
    (2, "this code reads v5 and migrates from v3 on, so it cannot read it")])
def test_a_trace_of_a_schema_it_cannot_read_names_both_versions_and_what_to_do(
        run_dir, version, advice):
    _set_schema(run_dir, version)
    with pytest.raises(ValueError, match=f"has trace schema v{version}; {advice}$"):
        load_run(run_dir)


def test_recheck_reexecutes_in_the_sandbox_and_agrees_with_true_records(run_dir, capsys):
    from spade_ray.execution import Sandbox

    task, candidates = f.task(0), [candidate(2), candidate(3, FAILS)]
    with Sandbox("local", workers=1) as sandbox:
        checks = sandbox.check_many([c.code for c in candidates], [task.tests] * 2,
                                    limits=task.limits)
    assert [ch.passed for ch in checks] == [True, False]
    with TraceStore(run_dir / "trace.sqlite", "run") as store:
        record(store, 1, candidates, checks)
    assert cli.main(["diagnose", str(run_dir), "--recheck", "4"]) == 0
    assert "4 of 4 re-executed candidates agree" in capsys.readouterr().out


def test_recheck_fails_a_recorded_pass_that_does_not_reproduce(tmp_path, capsys):
    with TraceStore(tmp_path / "trace.sqlite", "run") as store:
        store.record_task(0, f.task(0), True, "", V)
        record(store, 0, [candidate(0, FAILS)], [f.check()])  # recorded as passing; it fails
    assert failing(tmp_path) == set()  # the records agree with each other ...
    assert cli.main(["diagnose", str(tmp_path), "--recheck", "1"]) == 1  # ... not with the code
    assert "FAIL  re-executed candidates match the scores" in capsys.readouterr().out


def test_a_candidate_without_its_execution_row_fails(run_dir):
    with sqlite3.connect(run_dir / "trace.sqlite") as db:
        db.execute("DELETE FROM executions WHERE candidate_id='t0/0'")
    assert failing(run_dir) == {CheckName.RECORDS_COMPLETE}


def test_an_admitted_output_without_its_task_row_fails(run_dir):
    with sqlite3.connect(run_dir / "trace.sqlite") as db:
        db.execute("DELETE FROM tasks")
    assert CheckName.ADMITTED_TASKS in failing(run_dir)


def test_a_suspected_hack_that_passed_fails(tmp_path):
    with TraceStore(tmp_path / "trace.sqlite", "run") as store:
        record(store, 0, [candidate(0)], [dataclasses.replace(f.check(), suspicion="read fd 3")])
    assert failing(tmp_path) == {CheckName.HACKS}
