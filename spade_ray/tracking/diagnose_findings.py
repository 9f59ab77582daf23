"""The findings of `spade-ray diagnose` (see diagnose.py): verdict levels, check names, failure
classes, and the frozen records a diagnosis is made of, plus the small text helpers every section
uses to build its counts and one-line examples.

Scope: typed data and pure string helpers. Non-goals: reading a trace (diagnose_run.py), deciding
a verdict (the section modules), printing one (diagnose_format.py).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable

from spade_ray.records import RoundMetrics
from spade_ray.tracking.query import printable

EXAMPLES = 2  # examples shown per count


class Level(enum.StrEnum):
    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"


class CheckName(enum.StrEnum):
    ADMITTED_TASKS = "admitted outputs have valid task rows"
    CANDIDATE_TASKS = "attempted tasks have rows"
    RECORDS_COMPLETE = "every candidate has one execution and one score"
    HACKS = "suspected hacks"
    SYNTAX_SHARE = "share of candidates that do not parse"
    ENV_STABLE = "env_hash stable"
    LIMITS_ENFORCED = "limits enforced"
    SANDBOX_ERRORS = "sandbox errors re-run"
    METRICS_MATCH = "metrics.jsonl matches the trace"
    RESCORE = "re-scored executions match the scores"
    RECHECK = "re-executed candidates match the scores"
    PAIR_ORDER = "chosen ranks above rejected"
    PAIR_SCORES = "pair scores match their records"
    DUPLICATES = "no duplicate pairs"
    SHIFT = "task distribution shift"


class FailureClass(enum.StrEnum):
    """How a candidate fared; each candidate is in exactly one class (see `classify`). The
    classes of a run that ended on a limit, a kill or a sandbox failure are ExecStatus values."""

    SUSPECTED_HACK = "suspected hack"
    PASSED = "passed"
    WRONG_ANSWER = "wrong answer"
    SYNTAX_ERROR = "syntax error"
    RUNTIME_ERROR = "runtime error"
    TIMEOUT = "timeout"
    MEMORY_LIMIT = "memory_limit"
    OUTPUT_LIMIT = "output_limit"
    KILLED = "killed"
    SANDBOX_ERROR = "sandbox_error"


@dataclasses.dataclass(frozen=True)
class Example:
    id: str
    excerpt: str  # one line


@dataclasses.dataclass(frozen=True)
class Count:
    label: str
    count: int
    examples: tuple[Example, ...] = ()


@dataclasses.dataclass(frozen=True)
class Check:
    name: CheckName
    level: Level
    why: str
    examples: tuple[Example, ...] = ()


@dataclasses.dataclass(frozen=True)
class Section:
    key: str  # tasks | candidates | environment | evaluator | training
    title: str
    counts: tuple[Count, ...]
    notes: tuple[str, ...]
    checks: tuple[Check, ...]

    def count(self, label: str) -> int:
        return sum(c.count for c in self.counts if c.label == label)


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    run_dir: str
    run_id: str
    rounds: tuple[int, ...]  # rounds with any row
    completed: tuple[int, ...]  # rounds with a `rounds` row
    metrics: tuple[RoundMetrics, ...]  # metrics.jsonl
    sections: tuple[Section, ...]

    @property
    def checks(self) -> tuple[Check, ...]:
        return tuple(c for s in self.sections for c in s.checks)

    def check(self, name: CheckName) -> Check:
        return next(c for c in self.checks if c.name is name)

    def section(self, key: str) -> Section:
        return next(s for s in self.sections if s.key == key)

    @property
    def exit_code(self) -> int:
        return 1 if any(c.level is Level.FAIL for c in self.checks) else 0


def group_counts(items: Iterable[tuple[str, Example]]) -> tuple[Count, ...]:
    """Group (label, example) pairs into Counts, labels in first-seen order."""
    groups: dict[str, list[Example]] = {}
    for label, example in items:
        groups.setdefault(label, []).append(example)
    return tuple(Count(label, len(ex), tuple(ex[:EXAMPLES])) for label, ex in groups.items())


def one_line(text: str, width: int = 80) -> str:
    """`text` on one line, safe for a terminal (`printable`: newlines shown as \\n, ESC as
    \\x1b ...), cut to `width` with '…'."""
    # escaping never shortens a text: its first width + 1 characters decide the cut
    flat = printable(text.strip()[:width + 1])
    return flat if len(flat) <= width else flat[:width - 1] + "…"


def last_line(text: str) -> str:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


def round_span(rounds: Iterable[int]) -> str:
    ordered = sorted(rounds)
    return ", ".join(map(str, ordered)) if len(ordered) < 3 or ordered != list(
        range(ordered[0], ordered[-1] + 1)) else f"{ordered[0]}-{ordered[-1]}"
