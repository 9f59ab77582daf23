import dataclasses
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from spade_ray.records import RoundState
from spade_ray.tracking import TracedTask, TraceStore, Versions
from spade_ray.tracking.trace import TraceInUse
from tests.tracking import factories as f

V = Versions(generator=3, solver=4)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(tmp_path):
    with TraceStore(tmp_path / "trace.db", run_id="run", max_text_chars=1000) as s:
        yield s


def test_valid_and_rejected_tasks_read_back_equal(store):
    store.record_task(0, f.task(0), valid=True, reason="", versions=V)
    store.record_task(0, f.task(1), valid=False, reason="reference fails", versions=V)
    assert store.tasks(0) == [TracedTask(f.task(0), True, ""),
                              TracedTask(f.task(1), False, "reference fails")]


def test_rejected_task_without_reason_is_refused(store):
    with pytest.raises(ValueError, match="t0.*without a reason"):
        store.record_task(0, f.task(0), valid=False, reason="", versions=V)


def test_generator_input_reads_back_equal(store):
    store.record_generator_input(0, f.generator_input(), V)
    assert store.generator_inputs(0) == [f.generator_input()]


def test_candidate_reads_back_equal(store):
    store.record_candidate(0, f.candidate(), V)
    assert store.candidates(0) == [f.candidate()]


def test_execution_reads_back_equal(store):
    store.record_execution(0, "t0/0", "t0", f.check(stdout="x\ny", passed=False), V)
    assert store.executions(0) == {"t0/0": f.check(stdout="x\ny", passed=False)}


def test_grader_suspicion_and_rerun_count_read_back_equal(store):
    check = f.check(passed=False)
    check = dataclasses.replace(
        check, suspicion="opened the grader's pipe",
        execution=dataclasses.replace(check.execution, attempts=2))
    store.record_execution(0, "t0/0", "t0", check, V)
    assert store.executions(0) == {"t0/0": check}


def test_score_reads_back_equal(store):
    store.record_score(0, f.score(passed=False), V)
    assert store.scores(0) == [f.score(passed=False)]


def test_pair_reads_back_equal(store):
    store.record_pairs(0, [f.pair()], V)
    assert store.pairs(0) == [f.pair()]


def test_every_row_carries_run_round_and_versions(store):
    store.record_task(2, f.task(), True, "", V)
    store.record_generator_input(2, f.generator_input(), V)
    store.record_candidate(2, f.candidate(), V)
    store.record_execution(2, "t0/0", "t0", f.check(), V)
    store.record_score(2, f.score(), V)
    store.record_pairs(2, [f.pair()], V)
    tables = ("tasks", "generator_inputs", "candidates", "executions", "scores", "pairs")
    stamps = {tuple(store._db.execute(f"SELECT run_id, round, generator_version, solver_version "
                                      f"FROM {t}").fetchone()) for t in tables}
    assert stamps == {("run", 2, 3, 4)}


def test_re_recording_the_same_items_adds_no_rows(store):
    items = [f.candidate("t0", i) for i in range(5)]
    assert store.record_candidates(0, items, V) == 5
    assert store.record_candidates(0, items, V) == 0
    assert store.count("candidates", 0) == 5


def test_complete_round_sets_the_resume_point(store):
    store.complete_round(0, f.metrics(0), RoundState(weights_version=0))
    store.complete_round(1, f.metrics(1), RoundState(weights_version=1))
    assert (store.last_completed_round(), store.round_state(1)) == (
        1, RoundState(weights_version=1))


def test_completing_a_round_again_with_other_metrics_is_refused(store):
    store.complete_round(0, f.metrics(0), RoundState())
    store.complete_round(0, f.metrics(0), RoundState())  # same data: a no-op
    with pytest.raises(ValueError, match="already completed"):
        store.complete_round(0, f.metrics(0, pass_at_1=0.5), RoundState())


def test_round_state_of_an_unfinished_round_names_it(store):
    with pytest.raises(KeyError, match="round 3 .* never completed"):
        store.round_state(3)


def test_discard_incomplete_keeps_completed_rounds(store):
    for r in (0, 1):
        store.record_candidates(r, [f.candidate("t0", 0), f.candidate("t0", 1)], V)
    store.complete_round(0, f.metrics(0), RoundState())
    assert store.discard_incomplete(1) == 2
    assert (store.count("candidates", 0), store.count("candidates", 1)) == (2, 0)


def test_discard_refuses_a_completed_round(store):
    store.complete_round(0, f.metrics(0), RoundState())
    with pytest.raises(ValueError, match="round 0 .* is completed"):
        store.discard_incomplete(0)


def test_rows_of_other_runs_are_invisible(tmp_path):
    with TraceStore(tmp_path / "t.db", "a") as a, TraceStore(tmp_path / "t.db", "b") as b:
        a.record_candidate(0, f.candidate(), V)
        a.complete_round(0, f.metrics(0, run_id="a"), RoundState())
        assert (b.candidates(), b.last_completed_round()) == ([], None)


def test_long_output_is_cut_with_a_marker_keeping_head_and_tail(store):
    stdout = "HEAD" + "x" * 5000 + "TAIL"
    store.record_execution(0, "t0/0", "t0", f.check(stdout=stdout), V)
    kept = store.executions(0)["t0/0"].execution.stdout
    (state,) = store._db.execute("SELECT text_state FROM executions").fetchone()
    assert (state, len(kept) <= 1000) == ("truncated", True)
    assert kept.startswith("HEAD") and kept.endswith("TAIL") and "chars truncated" in kept


def test_short_output_is_stored_whole(store):
    store.record_execution(0, "t0/0", "t0", f.check(stdout="y" * 1000), V)
    (state,) = store._db.execute("SELECT text_state FROM executions").fetchone()
    assert state == "full"


def _fill_rounds(store, rounds, stdout_chars=900, n=50):
    for r in range(rounds):
        items = [(f"t{r}/{i}", f"t{r}", f.check(stdout=f"{r}" * stdout_chars)) for i in range(n)]
        store.record_executions(r, items, V)
        store.record_scores(r, [f.score(cid) for cid, _, _ in items], V)
        store.complete_round(r, f.metrics(r), RoundState())


def test_prune_empties_texts_of_old_rounds_only(store):
    _fill_rounds(store, 3)
    store.prune(keep_rounds=2)
    stdouts = {r: {c.execution.stdout for c in store.executions(r).values()} for r in range(3)}
    assert stdouts == {0: {""}, 1: {"1" * 900}, 2: {"2" * 900}}


def test_prune_keeps_scalar_rows(store):
    _fill_rounds(store, 3)
    store.prune(keep_rounds=1)
    assert [store.count("scores", r) for r in range(3)] == [50, 50, 50]


def test_prune_gives_space_back(tmp_path):
    with TraceStore(tmp_path / "t.db", "run") as s:
        _fill_rounds(s, 4, stdout_chars=20_000, n=40)
        s._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        before = s.size_bytes()
        s.prune(keep_rounds=1)
        assert s.size_bytes() < before * 0.5


def test_size_cap_prunes_when_a_round_completes(tmp_path):
    with TraceStore(tmp_path / "t.db", "run", max_bytes=1_000_000) as s:
        _fill_rounds(s, 4, stdout_chars=20_000, n=30)  # ~2.4 MB of stdout unpruned
        assert s.size_bytes() < 1_000_000


def test_schema_of_another_version_is_refused(tmp_path):
    TraceStore(tmp_path / "t.db", "run").close()
    with sqlite3.connect(tmp_path / "t.db") as db:
        db.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    with pytest.raises(RuntimeError, match="schema v999"):
        TraceStore(tmp_path / "t.db", "run")


def test_a_file_of_the_previous_schema_is_brought_up_to_date_with_nothing_lost(tmp_path):
    # A v3 file (before tasks.most_shown, candidates.draws and the scores' codec margins) as a
    # run recorded it: the run resumes on it.
    with TraceStore(tmp_path / "t.db", "run") as s:
        s.record_task(0, f.task(0), valid=True, reason="", versions=V)
        s.record_candidate(0, f.candidate(), V)
        s.record_score(0, f.score(), V)
    with sqlite3.connect(tmp_path / "t.db") as db:
        db.execute("ALTER TABLE tasks DROP COLUMN most_shown")
        db.execute("ALTER TABLE candidates DROP COLUMN draws")
        db.execute("ALTER TABLE scores DROP COLUMN codec_cpu_s")
        db.execute("ALTER TABLE scores DROP COLUMN codec_mb")
        db.execute("UPDATE meta SET value='3' WHERE key='schema_version'")
    with TraceStore(tmp_path / "t.db", "run") as s:
        s.record_task(1, dataclasses.replace(f.task(1), most_shown=3), valid=True, reason="",
                      versions=V)
        s.record_candidate(1, dataclasses.replace(f.candidate(index=1), draws=3), V)
        assert [t.task for t in s.tasks()] == [f.task(0), dataclasses.replace(f.task(1),
                                                                             most_shown=3)]
        assert [c.draws for c in s.candidates()] == [1, 3]
        assert f.task(0).most_shown is None
        margins = dataclasses.replace(f.score("t0/1"), codec_cpu_s=0.5, codec_mb=3.0)
        s.record_score(1, margins, V)
        assert s.scores() == [f.score(), margins]


# Writes rounds forever, resuming like the loop does. Ids carry the attempt (pid), so rows a
# killed attempt left behind would show up as extra rows in a round.
CHILD = """
import os, sys
from spade_ray.records import RoundState
from spade_ray.tracking import TraceStore, Versions
from tests.tracking import factories as f
store = TraceStore(sys.argv[1], "run")
last = store.last_completed_round()
r = 0 if last is None else last + 1
store.discard_incomplete(r)
while True:
    for b in range(4):  # batches of 100 rows, 10 kB each: a kill often lands mid-transaction
        items = [(f"t{r}/{os.getpid()}-{b}-{i}", f"t{r}", f.check(stdout="z" * 10_000))
                 for i in range(100)]
        store.record_executions(r, items, Versions(r, r))
    store.complete_round(r, f.metrics(r), RoundState(replay_cursor=r + 1))
    print(r, flush=True)
    r += 1
"""


def _run_and_kill(db: Path, rounds_before_kill: int, delay_s: float) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CHILD), str(db)], cwd=REPO,
                             env=env, stdout=subprocess.PIPE, text=True)
    try:
        for done, _ in enumerate(child.stdout, start=1):
            if done >= rounds_before_kill:
                break
        else:
            pytest.fail(f"the writer exited before completing {rounds_before_kill} rounds")
        time.sleep(delay_s)  # into the next round's writes
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()


def _rows_per_round_and_attempts(s: TraceStore) -> dict[int, tuple[int, int]]:
    rows = s._db.execute("SELECT round, COUNT(*), COUNT(DISTINCT substr(candidate_id, 1, "
                         "instr(candidate_id, '-'))) FROM executions GROUP BY round")
    return {r: (n, attempts) for r, n, attempts in rows}


def test_sigkill_mid_write_leaves_completed_rounds_intact(tmp_path):
    _run_and_kill(tmp_path / "t.db", rounds_before_kill=3, delay_s=0.05)
    with TraceStore(tmp_path / "t.db", "run") as s:
        assert s._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        last = s.last_completed_round()
        assert last == 2 or last == 3  # killed after round 2, maybe just after round 3
        assert s.round_state(last) == RoundState(replay_cursor=last + 1)
        assert [s.count("executions", r) for r in range(last + 1)] == [400] * (last + 1)
        assert s.count("executions", last + 1) % 100 == 0  # a transaction is all or nothing


def test_resume_after_repeated_sigkill_loses_and_duplicates_nothing(tmp_path):
    for delay_s in (0.0, 0.02, 0.04):
        _run_and_kill(tmp_path / "t.db", rounds_before_kill=1, delay_s=delay_s)
    with TraceStore(tmp_path / "t.db", "run") as s:
        last = s.last_completed_round()
        per_round = _rows_per_round_and_attempts(s)
    assert last >= 2
    assert [per_round[r] for r in range(last + 1)] == [(400, 1)] * (last + 1)


def test_a_second_writer_is_refused_until_the_first_closes(tmp_path):
    # Red-team pass 11: a second `spade-ray run` of one run directory discarded the first's
    # rows in flight as a killed round's, ran the round beside it and spliced the two.
    path = tmp_path / "trace.sqlite"
    first = TraceStore(path, "run")
    with pytest.raises(TraceInUse, match=r"'run' is being written by another process \(it "
                                         r"holds trace.sqlite.\w+.lock\)"):
        TraceStore(path, "run")
    TraceStore(path, "other run").close()  # another run's rows in the same file are its own
    first.record_task(0, f.task(), True, "", V)
    first.close()
    with TraceStore(path, "run") as second:  # a run that ended (or was killed) lets go
        assert [t.task.task_id for t in second.tasks()] == ["t0"]
