"""The trace store's tables and the conversion between records and rows.

Scope: the DDL (one table per record kind) and the two directions of one mapping, record -> row
and row -> record, built on `records.to_dict` / `records.from_dict` so that the trace store adds
no second serialisation format. Columns carry the record's field names, so SQL reads like the
records; nested records (a Task's tests and limits, a check's outcomes) are JSON text.
Non-goals: opening connections, transactions, queries (trace.py, query.py).
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import typing
from pathlib import Path
from typing import Any, TypeVar

from spade_ray.records import CheckResult, Completion, ExecResult, Task, from_dict, to_dict

R = TypeVar("R")

SCHEMA_VERSION = 5  # 2: executions.attempts, .suspicion; 3: generator rewards, pair roles;
# 4: tasks.most_shown, candidates.draws; 5: scores.codec_cpu_s, .codec_mb
# What turns a file of the version it is keyed by into the next: a run recorded before resumes
# with nothing lost (a task recorded without most_shown reads None: its visible examples; a
# candidate without draws, 1; a score without codec margins, 0: the margins before them).
MIGRATIONS = {3: ("ALTER TABLE tasks ADD COLUMN most_shown INTEGER",
                  "ALTER TABLE candidates ADD COLUMN draws INTEGER NOT NULL DEFAULT 1"),
              4: ("ALTER TABLE scores ADD COLUMN codec_cpu_s REAL NOT NULL DEFAULT 0",
                  "ALTER TABLE scores ADD COLUMN codec_mb REAL NOT NULL DEFAULT 0")}

# Every row says which run, which round, and which weights were live when it was written.
_STAMP = """run_id TEXT NOT NULL, round INTEGER NOT NULL,
    generator_version INTEGER NOT NULL, solver_version INTEGER NOT NULL,
    recorded_at REAL NOT NULL"""

# text_state: 'full' | 'truncated' (cut to max_text_chars on write) | 'pruned' (emptied by prune).
TABLES: dict[str, str] = {
    "tasks": """task_id TEXT NOT NULL, valid INTEGER NOT NULL, reason TEXT NOT NULL,
        family TEXT NOT NULL, topic TEXT NOT NULL, description TEXT NOT NULL,
        entry_point TEXT NOT NULL, signature TEXT NOT NULL, tests TEXT NOT NULL,
        reference TEXT NOT NULL, buggy TEXT, visible TEXT NOT NULL, limits TEXT NOT NULL,
        source TEXT NOT NULL, most_shown INTEGER,
        task_generator_version INTEGER NOT NULL,
        PRIMARY KEY (run_id, round, task_id)""",
    "generator_inputs": """input_index INTEGER NOT NULL, prompt TEXT NOT NULL, text TEXT NOT NULL,
        prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,
        finish_reason TEXT NOT NULL, weights_version INTEGER NOT NULL, outcome TEXT NOT NULL,
        task_id TEXT, family TEXT NOT NULL, executed INTEGER NOT NULL, pass_rate REAL,
        reward REAL,
        text_state TEXT NOT NULL,
        PRIMARY KEY (run_id, round, input_index)""",
    "candidates": """candidate_id TEXT NOT NULL, task_id TEXT NOT NULL, code TEXT NOT NULL,
        candidate_solver_version INTEGER NOT NULL, prompt_tokens INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL, draws INTEGER NOT NULL DEFAULT 1,
        PRIMARY KEY (run_id, round, candidate_id)""",
    "executions": """candidate_id TEXT NOT NULL, task_id TEXT NOT NULL, status TEXT NOT NULL,
        exit_code INTEGER, stdout TEXT NOT NULL, stderr TEXT NOT NULL, truncated INTEGER NOT NULL,
        wall_s REAL NOT NULL, cpu_s REAL NOT NULL, peak_memory_mb REAL NOT NULL,
        env_hash TEXT NOT NULL, limits_enforced_by TEXT NOT NULL, detail TEXT NOT NULL,
        attempts INTEGER NOT NULL, outcomes TEXT NOT NULL, tests_total INTEGER NOT NULL,
        passed INTEGER NOT NULL, suspicion TEXT NOT NULL, text_state TEXT NOT NULL,
        PRIMARY KEY (run_id, round, candidate_id)""",
    "scores": """candidate_id TEXT NOT NULL, task_id TEXT NOT NULL, value REAL NOT NULL,
        passed INTEGER NOT NULL, tests_passed INTEGER NOT NULL, tests_total INTEGER NOT NULL,
        status TEXT NOT NULL, cpu_s REAL NOT NULL, peak_memory_mb REAL NOT NULL,
        codec_cpu_s REAL NOT NULL DEFAULT 0, codec_mb REAL NOT NULL DEFAULT 0,
        PRIMARY KEY (run_id, round, candidate_id)""",
    "pairs": """task_id TEXT NOT NULL, prompt TEXT NOT NULL, chosen TEXT NOT NULL,
        rejected TEXT NOT NULL, chosen_candidate_id TEXT NOT NULL,
        rejected_candidate_id TEXT NOT NULL, chosen_score REAL NOT NULL,
        rejected_score REAL NOT NULL, pair_solver_version INTEGER NOT NULL,
        pair_generator_version INTEGER NOT NULL, role TEXT NOT NULL,
        PRIMARY KEY (run_id, round, chosen_candidate_id, rejected_candidate_id)""",
    # Written once, when a round completes: the resume point (state) and its metrics.
    "rounds": """metrics TEXT NOT NULL, state TEXT NOT NULL,
        PRIMARY KEY (run_id, round)""",
}

INDEXES = (
    "CREATE INDEX IF NOT EXISTS candidates_by_task ON candidates (run_id, task_id)",
    "CREATE INDEX IF NOT EXISTS scores_by_task ON scores (run_id, task_id)",
)

# Record fields whose name collides with the row's version stamp. A seed or archived task has its
# own generator_version, which differs from the generator live in the round that used it.
_RENAMES: dict[str, dict[str, str]] = {
    "tasks": {"generator_version": "task_generator_version"},
    "candidates": {"solver_version": "candidate_solver_version"},
    "pairs": {"solver_version": "pair_solver_version",
              "generator_version": "pair_generator_version"},
}

@dataclasses.dataclass(frozen=True)
class Versions:
    """Weights versions of the generator and the solver live when a row was written."""

    generator: int
    solver: int


@dataclasses.dataclass(frozen=True)
class GeneratorInput:
    """One generator output: the prompt, what came back, whether it became a task, its reward."""

    index: int  # position in the round's generator outputs (the natural key)
    prompt: str
    completion: Completion
    outcome: str  # "admitted", or why the text is not a task (a parse or admission reason)
    task_id: str | None = None  # the admitted task, if any
    family: str = ""  # the task family the prompt asked for
    executed: bool = False  # it went through admission (parsed, not a copy of a known task)
    pass_rate: float | None = None  # the solver's, on the admitted task (None: not solved)
    reward: float | None = None  # the generator's reward (None: not known, no pair uses it)


@dataclasses.dataclass(frozen=True)
class TracedTask:
    task: Task
    valid: bool
    reason: str  # "" when valid


def create_tables(db: sqlite3.Connection, path: Path) -> None:
    """Create every table and index if missing, bring a file of an older schema up to date
    (MIGRATIONS); refuse a file written by another schema. The caller holds a transaction."""
    db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
    db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    (found,) = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    while found.isdigit() and int(found) in MIGRATIONS:  # in the caller's transaction
        for statement in MIGRATIONS[int(found)]:
            db.execute(statement)
        found = str(int(found) + 1)
        db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (found,))
    if found != str(SCHEMA_VERSION):
        raise RuntimeError(f"{path} has trace schema v{found}, this code writes "
                           f"v{SCHEMA_VERSION}; use a new trace file")
    for name, body in TABLES.items():
        db.execute(f"CREATE TABLE IF NOT EXISTS {name} ({_STAMP},\n    {body})")
    for statement in INDEXES:
        db.execute(statement)


def record_to_row(table: str, record: Any) -> dict[str, Any]:
    """A record's fields as column values: nested data as JSON text, booleans as 0/1."""
    data = to_dict(record)
    renames = _RENAMES.get(table, {})
    return {renames.get(k, k): _to_column(v) for k, v in data.items()}


def row_to_record(table: str, cls: type[R], row: dict[str, Any]) -> R:
    """Rebuild `cls` from a row written by `record_to_row` (extra columns are ignored)."""
    back = {new: old for old, new in _RENAMES.get(table, {}).items()}
    data = {back.get(k, k): v for k, v in row.items()}
    return _from_columns(cls, data)


def check_to_row(check: CheckResult) -> dict[str, Any]:
    """A CheckResult flattened: its ExecResult's fields become columns of `executions`."""
    data = to_dict(check)
    execution = data.pop("execution")
    return {k: _to_column(v) for k, v in {**execution, **data}.items()}


def row_to_check(row: dict[str, Any]) -> CheckResult:
    execution = _from_columns(ExecResult, row)
    rest = {k: row[k] for k in ("outcomes", "tests_total", "passed", "suspicion")}
    rest["outcomes"] = json.loads(rest["outcomes"])
    rest["passed"] = bool(rest["passed"])
    return from_dict(CheckResult, {"execution": to_dict(execution), **rest})


def _to_column(value: Any) -> Any:
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return int(value)
    return value


def _from_columns(cls: type[R], row: dict[str, Any]) -> R:
    hints = typing.get_type_hints(cls)
    data: dict[str, Any] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        value = row[field.name]
        hint = hints[field.name]
        if hint is bool:
            value = bool(value)
        elif isinstance(value, str) and _is_structured(hint):
            value = json.loads(value)
        data[field.name] = value
    return from_dict(cls, data)


def _is_structured(hint: Any) -> bool:
    """True for fields stored as JSON: nested records and tuples."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return True
    return typing.get_origin(hint) is tuple


def truncate_text(text: str, max_chars: int) -> tuple[str, bool]:
    """Keep the head and the tail (tracebacks end stderr) around a marker; (text, was_cut)."""
    if len(text) <= max_chars:
        return text, False
    marker_len = 80  # room for the marker below, whose digits vary
    keep = max_chars - marker_len
    head, tail = keep // 2, keep - keep // 2
    cut = len(text) - head - tail
    marker = f"\n[... {cut} chars truncated by the trace store ...]\n"
    return f"{text[:head]}{marker}{text[-tail:]}", True
