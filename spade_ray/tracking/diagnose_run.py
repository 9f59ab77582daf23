"""One run's trace for `spade-ray diagnose` (see diagnose.py): `load_run` reads
run_dir/trace.sqlite through query.py's read-only connection, turns its rows into records with
schema.py, and adds the run's metrics.jsonl lines, into one frozen `RunTrace`.

Scope: reading and validating the inputs (the directory, the schema version, which run id). A
trace of an older schema is read through schema.MIGRATIONS applied to an in-memory copy, so the
file on disk is never changed (`spade-ray run` of that run migrates it in place).
Non-goals: writing or repairing a trace (trace.py), judging what was read (the section modules).
"""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path
from typing import Any

from spade_ray.records import (
    Candidate,
    CheckResult,
    Completion,
    PreferencePair,
    RoundMetrics,
    Score,
    Task,
)
from spade_ray.tracking import query, schema
from spade_ray.tracking.metrics import load_metrics
from spade_ray.tracking.schema import GeneratorInput, TracedTask

Keyed = tuple[int, str]  # (round, candidate_id): the key of executions and scores rows


@dataclasses.dataclass(frozen=True)
class RunTrace:
    """One run's rows as records, each with its round; read once, read-only."""

    run_dir: Path
    run_id: str
    completed: tuple[int, ...]
    tasks: tuple[tuple[int, TracedTask], ...]
    inputs: tuple[tuple[int, GeneratorInput], ...]
    candidates: tuple[tuple[int, Candidate], ...]
    checks: dict[Keyed, CheckResult]
    scores: dict[Keyed, Score]
    pairs: tuple[tuple[int, PreferencePair], ...]
    metrics: tuple[RoundMetrics, ...]  # metrics.jsonl's rows of this run
    schema_note: str = ""  # how the trace was read, when not as is (an older schema, migrated)
    metrics_run_ids: tuple[str, ...] = ()  # every run metrics.jsonl has rows of, this one too

    @property
    def rounds(self) -> tuple[int, ...]:
        found = {r for r, _ in (*self.tasks, *self.inputs, *self.candidates, *self.pairs)}
        return tuple(sorted(found | set(self.completed)))

    def known_tasks(self) -> dict[str, Task]:
        return {t.task.task_id: t.task for _, t in self.tasks}


def load_run(run_dir: str | Path, run_id: str | None = None) -> RunTrace:
    """Read run_dir/trace.sqlite (read-only) and metrics.jsonl; ValueError names a bad input."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"no run directory at {run_dir} (give runs/NAME of a run)")
    db = run_dir / "trace.sqlite"
    if not db.is_file():
        raise ValueError(f"no trace at {db}: a run writes run_dir/trace.sqlite")
    conn, note = _connect(db)
    try:
        run_id = _one_run_id(db, conn, run_id)
        rows = {table: _rows(conn, table, run_id) for table in schema.TABLES}
    except sqlite3.DatabaseError as e:  # a damaged page past the header
        raise ValueError(f"cannot read the trace {db}: {e}") from e
    finally:
        conn.close()
    metrics = load_metrics(run_dir / "metrics.jsonl")
    return RunTrace(
        run_dir=run_dir, run_id=run_id, schema_note=note,
        completed=tuple(r["round"] for r in rows["rounds"]),
        tasks=tuple((r["round"], TracedTask(schema.row_to_record("tasks", Task, r),
                                            bool(r["valid"]), r["reason"]))
                    for r in rows["tasks"]),
        inputs=tuple((r["round"], _generator_input(r)) for r in rows["generator_inputs"]),
        candidates=tuple((r["round"], schema.row_to_record("candidates", Candidate, r))
                         for r in rows["candidates"]),
        checks={(r["round"], r["candidate_id"]): schema.row_to_check(r)
                for r in rows["executions"]},
        scores={(r["round"], r["candidate_id"]): schema.row_to_record("scores", Score, r)
                for r in rows["scores"]},
        pairs=tuple((r["round"], schema.row_to_record("pairs", PreferencePair, r))
                    for r in rows["pairs"]),
        metrics=tuple(m for m in metrics if m.run_id == run_id),
        metrics_run_ids=tuple(sorted({m.run_id for m in metrics})))


def _connect(db: Path) -> tuple[sqlite3.Connection, str]:
    """A read-only connection to a trace of this code's schema, or to a migrated in-memory copy
    of one of an older schema; and a note saying which (empty: the file as is)."""
    try:
        conn = query.connect_readonly(db)
    except sqlite3.Error as e:  # unopenable, or not a database at all
        raise ValueError(f"cannot read the trace {db}: {e}") from e
    keep = False
    try:
        found = query.schema_version(db, conn)
        if found == str(schema.SCHEMA_VERSION):
            keep = True
            return conn, ""
        if not _migratable(found):
            newer = found.isdigit() and int(found) > schema.SCHEMA_VERSION
            raise ValueError(
                f"{db} has trace schema v{found}; this code reads v{schema.SCHEMA_VERSION}"
                + (": a newer spade-ray wrote it, diagnose it with that version" if newer else
                   f" and migrates from v{min(schema.MIGRATIONS)} on, so it cannot read it"))
        copy = sqlite3.connect(":memory:")
        try:
            conn.backup(copy)
            schema.create_tables(copy, db)  # the migrations, on the copy only
            copy.commit()
        except BaseException:
            copy.close()
            raise
    except sqlite3.Error as e:
        raise ValueError(f"cannot read the trace {db}: {e}") from e
    finally:
        if not keep:
            conn.close()
    return copy, (f"note: {db} has trace schema v{found}; read through the migrations to "
                  f"v{schema.SCHEMA_VERSION} in memory, the file unchanged (`spade-ray run` of "
                  "this run migrates it in place)")


def _migratable(found: str) -> bool:
    version = int(found) if found.isdigit() else None
    while version in schema.MIGRATIONS:
        version += 1
    return version == schema.SCHEMA_VERSION


def _one_run_id(db: Path, conn: sqlite3.Connection, run_id: str | None) -> str:
    try:
        ids = sorted(r for (r,) in conn.execute(" UNION ".join(
            f"SELECT run_id FROM {t}" for t in schema.TABLES)))
    except sqlite3.OperationalError as e:  # a table missing
        raise ValueError(f"{db} is not a trace store ({e})") from e
    if not ids:
        raise ValueError(f"{db} holds no rows: nothing to diagnose")
    if run_id is None and len(ids) > 1:
        raise ValueError(f"{db} holds runs {ids}: name one with --run-id")
    if run_id is not None and run_id not in ids:
        raise ValueError(f"{db} holds no rows of run {run_id!r}; its runs: {ids}")
    return run_id or ids[0]


def _rows(conn: sqlite3.Connection, table: str, run_id: str) -> list[dict[str, Any]]:
    cur = conn.execute(f"SELECT * FROM {table} WHERE run_id=? ORDER BY round, rowid", (run_id,))
    columns = [d[0] for d in cur.description]
    return [dict(zip(columns, row)) for row in cur]


def _generator_input(row: dict[str, Any]) -> GeneratorInput:
    return GeneratorInput(row["input_index"], row["prompt"],
                          schema.row_to_record("generator_inputs", Completion, row),
                          row["outcome"], row["task_id"], row["family"], bool(row["executed"]),
                          row["pass_rate"], row["reward"])
