import re
import shutil
import sqlite3

import pytest

from spade_ray.records import RoundState
from spade_ray.tracking import TraceStore, Versions, query
from spade_ray.tracking.schema import TABLES
from tests.tracking import factories as f

V = Versions(generator=1, solver=1)


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "trace.db"
    with TraceStore(path, "run") as s:
        s.record_task(0, f.task(0), True, "", V)
        s.record_task(0, f.task(1), False, "reference fails", V)
        s.record_candidates(0, [f.candidate("t0", 0), f.candidate("t0", 1)], V)
        s.record_scores(0, [f.score("t0/0", passed=True), f.score("t0/1", passed=False)], V)
        s.record_executions(0, [("t0/0", "t0", f.check())], V)
        s.record_pairs(0, [f.pair()], V)
        s.complete_round(0, f.metrics(0), RoundState())
        s.record_task(1, f.task(2), True, "", V)  # round 1 never completes
    return path


def _dicts(result):
    rows, columns = result
    return [dict(zip(columns, row)) for row in rows]


def test_summary_counts_each_round_and_marks_completion(db):
    rows = _dicts(query.summary(db))
    assert [(r["round"], r["completed"], r["tasks"], r["valid_tasks"], r["candidates"],
             r["passed"], r["pairs"]) for r in rows] == [(0, "yes", 2, 1, 2, 1, 1),
                                                         (1, "no", 1, 1, 0, 0, 0)]


def test_list_tasks_filters_on_validity(db):
    rows = _dicts(query.list_tasks(db, valid=False))
    assert [(r["task_id"], r["reason"]) for r in rows] == [("t1", "reference fails")]


def test_list_tasks_reports_pass_rate_of_candidates(db):
    (row,) = _dicts(query.list_tasks(db, round=0, valid=True))
    assert (row["candidates"], row["pass_rate"]) == (2, 0.5)


def test_list_candidates_joins_scores_and_executions(db):
    rows = _dicts(query.list_candidates(db, "t0"))
    assert [(r["candidate_id"], r["passed"], r["wall_s"]) for r in rows] == [
        ("t0/0", 1, 0.125), ("t0/1", 0, None)]


def test_run_sql_reads_while_a_writer_holds_the_file_open(db):
    with TraceStore(db, "run") as live:
        live.record_candidate(1, f.candidate("t2", 0), V)
        rows, _ = query.run_sql(db, "SELECT COUNT(*) FROM candidates WHERE round=1")
    assert rows == [(1,)]


@pytest.mark.parametrize("sql", ["DELETE FROM tasks", "DROP TABLE pairs",
                                 "INSERT INTO meta VALUES ('k', 'v')"])
def test_run_sql_refuses_writes(db, sql):
    with pytest.raises(sqlite3.OperationalError, match="readonly|read-only|query_only"):
        query.run_sql(db, sql)


def test_run_sql_refuses_attach(db, tmp_path):
    with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
        query.run_sql(db, f"ATTACH DATABASE '{tmp_path / 'other.db'}' AS other")
    assert not (tmp_path / "other.db").exists()


def test_missing_trace_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no trace store at .*nope.db"):
        query.summary(tmp_path / "nope.db")


def test_a_finished_trace_in_a_directory_that_refuses_its_shm_file_is_read(db, monkeypatch):
    with f.shm_refused(db.parent, monkeypatch):
        rows = _dicts(query.summary(db))
    assert [r["tasks"] for r in rows] == [2, 1]
    assert not db.with_name(db.name + "-shm").exists()


def test_commits_waiting_in_the_wal_of_such_a_directory_are_refused_saying_why(
        db, tmp_path, monkeypatch):
    # Read as immutable, the trace would silently lack the commits still in -wal.
    archived = tmp_path / "archived"
    archived.mkdir()
    with TraceStore(db, "run") as writer:
        writer.record_task(2, f.task(3), True, "", V)
        for suffix in ("", "-wal"):  # the files a crash leaves: no -shm
            shutil.copy(f"{db}{suffix}", archived / f"trace.sqlite{suffix}")
    assert (archived / "trace.sqlite-wal").stat().st_size > 0
    with f.shm_refused(archived, monkeypatch), pytest.raises(
            sqlite3.OperationalError, match="-wal holds .* bytes of commits not yet in the file; "
            "copy the run directory somewhere writable"):
        query.summary(archived / "trace.sqlite")


def test_module_docstring_documents_every_column(db):
    documented = set(re.findall(r"[a-z_]+", query.__doc__))
    columns = {c for table in [*TABLES, "meta"]
               for c in _dicts(query.run_sql(db, f"SELECT name FROM pragma_table_info('{table}')"))
               for c in [c["name"]]}
    assert columns - documented == set()


def test_format_table_aligns_cuts_and_counts():
    text = query.format_table([(1, "a\nb", None), (22, "x" * 100, 0.123456)],
                              ["n", "text", "value"], max_width=10)
    lines = text.splitlines()
    assert lines[0].split() == ["n", "text", "value"]
    assert lines[2].startswith(" 1  a\\nb") and lines[3].startswith("22  xxxxxxxxx…")
    assert lines[3].endswith("0.1235") and lines[-1] == "(2 rows)"
