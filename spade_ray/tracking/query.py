"""Read-only queries over a trace store: the functions behind `spade-ray trace`.

Every function opens the file read-only (`file:...?mode=ro`, plus `PRAGMA query_only` and no
ATTACH), so a query can never change a trace, even one a live run is writing (WAL lets readers
and the writer proceed together). Each returns (rows, columns); `format_table` prints them,
through `printable`, the one escape every terminal view of model text uses (diagnose too).
Non-goals: writing, pruning (trace.py), plots (plots.py).

Schema (SQLite). Every table starts with the stamp
    run_id TEXT, round INTEGER, generator_version INTEGER, solver_version INTEGER,
    recorded_at REAL (unix seconds)
where the versions are the weights live when the row was written. Booleans are 0/1; columns
marked JSON hold JSON text (use json_extract); primary keys make re-recording a no-op.

  tasks             (run_id, round, task_id) -- every admitted task, and every task the
                    round's solver attempted (replayed seeds and archive: see source)
      task_id, valid (1), reason (''), family (codegen | repair | predict), topic,
      description, entry_point, signature, tests JSON {examples [{args, expected}], ...},
      reference, buggy (repair: the mutant to fix), visible JSON (examples in the prompt),
      limits JSON, source, task_generator_version (the weights that wrote it; -1: seed),
      most_shown (the most examples the hint lever may show; NULL: the visible ones)
  generator_inputs  (run_id, round, input_index) -- one generator output each
      input_index, prompt, text (raw output), prompt_tokens, completion_tokens,
      finish_reason, weights_version, outcome ('admitted', or the parse or admission reason),
      task_id (when admitted), family (asked for), executed (went through admission),
      pass_rate (the solver's on the task),
      reward (the generator's; NULL: unknown), text_state
  candidates        (run_id, round, candidate_id) -- one solver attempt each
      candidate_id, task_id, code, candidate_solver_version, prompt_tokens, completion_tokens,
      draws (the solver's draws that gave this text; pass rates count each)
  executions        (run_id, round, candidate_id) -- a candidate run against its task's tests
      candidate_id, task_id, status, exit_code, stdout, stderr, truncated (by the sandbox),
      wall_s, cpu_s, peak_memory_mb, env_hash, limits_enforced_by, detail, attempts (2: a
      sandbox_error re-run), outcomes JSON [{name, outcome, message, wall_s}], tests_total,
      passed, suspicion (what the grader saw that honest code does not do), text_state
  scores            (run_id, round, candidate_id) -- the evaluator's verdict
      candidate_id, task_id, value, passed, tests_passed, tests_total, status, cpu_s,
      peak_memory_mb, codec_cpu_s, codec_mb (what the harness's coding of the task's calls
      can cost the candidate: an efficiency difference counts only beyond it)
  pairs             (run_id, round, chosen_candidate_id, rejected_candidate_id)
      task_id, prompt, chosen, rejected, chosen_candidate_id, rejected_candidate_id,
      chosen_score, rejected_score, pair_solver_version, pair_generator_version, role
      (solver: candidate ids are candidates; generator: ids are generator/r<round>/<index>)
  rounds            (run_id, round) -- written when a round completes (the resume point)
      metrics JSON (RoundMetrics), state JSON (what the loop needs to resume)
  meta              key, value -- schema_version

text_state: 'full', 'truncated' (cut on write, a marker shows where) or 'pruned' (emptied by
rotation; scalar columns remain). Example:
    SELECT round, AVG(passed) FROM scores GROUP BY round;
    SELECT round, json_extract(metrics, '$.validation_pass_at_1') FROM rounds;
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spade_ray.tracking.schema import SCHEMA_VERSION

Rows = list[tuple[Any, ...]]

_SUMMARY = """
WITH keys AS (SELECT run_id, round FROM rounds UNION SELECT run_id, round FROM tasks
              UNION SELECT run_id, round FROM generator_inputs
              UNION SELECT run_id, round FROM candidates)
SELECT k.run_id, k.round,
  CASE WHEN r.round IS NULL THEN 'no' ELSE 'yes' END AS completed,
  r.generator_version, r.solver_version,
  (SELECT COUNT(*) FROM generator_inputs g WHERE g.run_id=k.run_id AND g.round=k.round)
    AS generator_outputs,
  (SELECT COUNT(*) FROM tasks t WHERE t.run_id=k.run_id AND t.round=k.round) AS tasks,
  (SELECT COUNT(*) FROM tasks t WHERE t.run_id=k.run_id AND t.round=k.round AND t.valid)
    AS valid_tasks,
  (SELECT COUNT(*) FROM candidates c WHERE c.run_id=k.run_id AND c.round=k.round) AS candidates,
  (SELECT COUNT(*) FROM scores s WHERE s.run_id=k.run_id AND s.round=k.round AND s.passed)
    AS passed,
  (SELECT COUNT(*) FROM pairs p WHERE p.run_id=k.run_id AND p.round=k.round) AS pairs
FROM keys k LEFT JOIN rounds r ON r.run_id=k.run_id AND r.round=k.round
WHERE (:run_id IS NULL OR k.run_id=:run_id)
ORDER BY k.run_id, k.round"""

_TASKS = """
SELECT t.run_id, t.round, t.task_id, t.valid, t.reason, t.family, t.topic, t.source,
  (SELECT COUNT(*) FROM scores s WHERE s.run_id=t.run_id AND s.round=t.round
     AND s.task_id=t.task_id) AS candidates,
  (SELECT AVG(s.passed) FROM scores s WHERE s.run_id=t.run_id AND s.round=t.round
     AND s.task_id=t.task_id) AS pass_rate,
  t.description
FROM tasks t
WHERE (:run_id IS NULL OR t.run_id=:run_id) AND (:round IS NULL OR t.round=:round)
  AND (:valid IS NULL OR t.valid=:valid)
ORDER BY t.run_id, t.round, t.rowid"""

_CANDIDATES = """
SELECT c.run_id, c.round, c.candidate_id, c.candidate_solver_version AS solver_version,
  s.status, s.passed, s.value, s.tests_passed, s.tests_total, e.wall_s, e.cpu_s,
  c.completion_tokens, e.detail
FROM candidates c
LEFT JOIN scores s USING (run_id, round, candidate_id)
LEFT JOIN executions e USING (run_id, round, candidate_id)
WHERE c.task_id=:task_id AND (:run_id IS NULL OR c.run_id=:run_id)
ORDER BY c.run_id, c.round, c.rowid"""


def connect_readonly(db: str | Path) -> sqlite3.Connection:
    """A connection that cannot write: read-only URI, query_only, ATTACH refused. It also reads
    a trace in a directory it may not write (an archived run, another user's, a read-only mount);
    sqlite3.OperationalError says what to do when it cannot."""
    path = Path(db)
    if not path.is_file():
        raise FileNotFoundError(f"no trace store at {path} (a run writes run_dir/trace.sqlite)")
    uri = path.resolve().as_uri()
    try:
        return _open(f"{uri}?mode=ro")
    except sqlite3.OperationalError as e:
        if getattr(e, "sqlite_errorcode", 0) & 0xFF not in _CANNOT_OPEN:  # primary code
            raise
        first = e
    # A trace is in WAL mode, and a WAL reader must create or write trace.sqlite-shm beside it,
    # which a directory (or -shm) it may not write refuses. immutable=1 reads the main file
    # alone: no -shm, no locks. That is exact only when no writer is live (one may checkpoint
    # into the file mid-read, unseen for want of locks) and nothing committed waits in -wal
    # (immutable ignores -wal; measured: SQLite 3.40 returns the pre-WAL rows). So: only after
    # the plain open failed, i.e. where we could not have been a writer either, and only when
    # -wal is absent or empty, as a finished run leaves it (its last close checkpoints). A live
    # writer of another user almost always has -wal content; that case is refused below.
    wal = path.with_name(path.name + "-wal")
    if wal.is_file() and wal.stat().st_size > 0:
        raise sqlite3.OperationalError(
            f"{first}: SQLite needs to write {path.name}-shm beside a WAL "
            f"trace, and {wal.name} holds {wal.stat().st_size} bytes of commits not yet in the "
            "file; copy the run directory somewhere writable and read the copy") from first
    try:
        return _open(f"{uri}?mode=ro&immutable=1")
    except sqlite3.OperationalError as e:
        raise sqlite3.OperationalError(f"{first} (read-only; and read as immutable: {e})") from e


# SQLITE_CANTOPEN (no -shm could be created) and SQLITE_READONLY (a -shm it may not write or
# initialise): what a WAL reader gets in a directory it may not write.
_CANNOT_OPEN = {sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY}


def _open(uri: str) -> sqlite3.Connection:
    conn = sqlite3.connect(uri, uri=True, timeout=30.0)
    try:
        conn.execute("PRAGMA query_only=ON")
        conn.set_authorizer(_deny_attach)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the file and WAL
    except BaseException:
        conn.close()
        raise
    return conn


def _deny_attach(action: int, *_: Any) -> int:
    # ATTACH could open a second, writable file from inside a "read-only" query.
    return sqlite3.SQLITE_DENY if action == sqlite3.SQLITE_ATTACH else sqlite3.SQLITE_OK


def run_sql(db: str | Path, sql: str, params: Sequence[Any] | dict[str, Any] = (),
            max_rows: int | None = None) -> tuple[Rows, list[str]]:
    """Run one read-only statement; writes fail with sqlite3.OperationalError."""
    conn = connect_readonly(db)
    try:
        cur = conn.execute(sql, params)
        rows = cur.fetchall() if max_rows is None else cur.fetchmany(max_rows)
        columns = [d[0] for d in cur.description] if cur.description else []
        return [tuple(r) for r in rows], columns
    finally:
        conn.close()


def schema_version(db: str | Path, conn: sqlite3.Connection) -> str:
    """The schema version the trace at `db` (open as `conn`) was written with."""
    try:
        found = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchall()
    except sqlite3.OperationalError as e:  # no meta table: some other SQLite file
        raise ValueError(f"{db} is not a trace store ({e})") from e
    if len(found) != 1:
        raise ValueError(f"{db} is not a trace store (no schema_version in its meta table)")
    return str(found[0][0])


def schema_note(db: str | Path) -> str:
    """'' for a trace of this code's schema; else a line saying that the file is read as it
    is, in the schema it was written with (`trace` and `report` do not migrate it)."""
    conn = connect_readonly(db)
    try:
        found = schema_version(db, conn)
    finally:
        conn.close()
    if found == str(SCHEMA_VERSION):
        return ""
    return (f"note: {db} has trace schema v{found}; this code writes v{SCHEMA_VERSION}. It is "
            "read as written: columns of the other version are missing, and a query naming "
            "one fails (`spade-ray diagnose` reads an older trace through the migrations)")


def table_names(db: str | Path) -> list[str]:
    """The trace's tables, for an error message that says what a query may read."""
    rows, _ = run_sql(db, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    return [name for (name,) in rows]


def summary(db: str | Path, run_id: str | None = None) -> tuple[Rows, list[str]]:
    """One row per (run, round): completed?, versions, and how many of each record."""
    return run_sql(db, _SUMMARY, {"run_id": run_id})


def list_tasks(db: str | Path, round: int | None = None, valid: bool | None = None,
               run_id: str | None = None) -> tuple[Rows, list[str]]:
    """Tasks with their verdict and how their candidates fared."""
    flag = None if valid is None else int(valid)
    return run_sql(db, _TASKS, {"run_id": run_id, "round": round, "valid": flag})


def list_candidates(db: str | Path, task_id: str,
                    run_id: str | None = None) -> tuple[Rows, list[str]]:
    """Every candidate for `task_id` with its score and execution figures."""
    return run_sql(db, _CANDIDATES, {"task_id": task_id, "run_id": run_id})


def format_table(rows: Rows, columns: Sequence[str], max_width: int = 48) -> str:
    """A plain-text table; long cells are cut with '…', newlines and every other character a
    terminal would act on shown as escapes (`printable`)."""
    columns = [printable(c) for c in columns]  # a `trace sql` column is named by its expression
    cells = [[_cell(v, max_width) for v in row] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    numeric = [all(isinstance(r[i], (int, float)) or r[i] is None for r in rows) and bool(rows)
               for i in range(len(columns))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric)).rstrip()

    out = [line(list(columns)), line(["-" * w for w in widths])]
    out += [line(r) for r in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)


def _cell(value: Any, max_width: int) -> str:
    if value is None:
        text = ""
    elif isinstance(value, float):
        text = f"{value:.4g}"
    else:  # escaping never shortens a text: its first max_width + 1 characters decide the cut
        text = printable(str(value)[:max_width + 1])
    return text if len(text) <= max_width else text[:max_width - 1] + "…"


# Escapes shorter than \xNN for the controls code is full of.
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """`text` as it is safe to show on a terminal: each character `str.isprintable` refuses is
    shown as its escape (`\\n`, `\\x1b`, `\\u202e`, `\\U000e0041`); everything else, non-ASCII
    letters included, is kept. Refused are the C0 and C1 controls (ESC starts the CSI / OSC
    sequences that clear a screen, hide text, set a title or write the clipboard; CR and BEL),
    the format characters (bidi controls U+202A-202E and U+2066-2069, zero-width U+200B-200F,
    U+FEFF, tag characters), U+2028/2029 and other separators but the space, surrogates,
    private-use and unassigned code points. Red-team pass 15, F2: a 57-character generator
    output printed raw by `diagnose` cleared the screen, printed a fake `verdict: OK` and hid
    the real FAIL lines. A backslash is not escaped, so `\\x1b` written as text and an escaped
    ESC look alike: the output is for reading, never for parsing back."""
    if text.isprintable():  # the common case, at C speed
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def _escape(ch: str) -> str:
    if ch in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else (
        f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
