"""The task text format: what the generator model writes and the few-shot examples show.

A small line-oriented format rather than JSON, because the default model is a 270M base model:
it copies labelled sections far more reliably than it balances braces and escapes quotes.

    Description: Return the string reversed.
    Signature: def reverse(s: str) -> str:
    Tests:
    assert reverse("abc") == "cba"
    assert reverse("") == ""
    Reference:
    def reverse(s: str) -> str:
        return s[::-1]

A repair task adds a `Buggy:` section (the program whose bug the tests expose) before
`Reference:`. Parsing is strict about structure and says what is wrong; it never guesses code.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re

from spade_ray.records import Limits, Task, TaskFamily, TaskSource, TestSuite

SECTIONS = ("Description", "Signature", "Tests", "Buggy", "Reference")
REQUIRED = tuple(s for s in SECTIONS if s != "Buggy")  # Buggy: repair tasks only
_HEADER = re.compile(rf"^({'|'.join(SECTIONS)}):[ \t]*(.*)$")
MIN_TESTS = 2
MAX_TESTS = 20


class TaskFormatError(ValueError):
    """The text is not a task; `reason` is a short, countable label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def parse_task(text: str, topic: str, limits: Limits = Limits(),
               source: TaskSource = TaskSource.GENERATED,
               generator_version: int = -1) -> Task:
    sections = _sections(text)
    missing = [s for s in REQUIRED if not sections.get(s, "").strip()]
    if missing:
        raise TaskFormatError("missing_section", f"no {', '.join(missing)} section")
    signature = sections["Signature"].strip().splitlines()[0].strip()
    entry_point = _entry_point(signature)
    tests = tuple(line.strip() for line in sections["Tests"].splitlines()
                  if line.strip().startswith("assert"))
    if not MIN_TESTS <= len(tests) <= MAX_TESTS:
        raise TaskFormatError("test_count", f"{len(tests)} assert lines; need {MIN_TESTS} to "
                                            f"{MAX_TESTS}")
    if not all(entry_point in t for t in tests):
        raise TaskFormatError("test_ignores_entry_point", f"a test does not call {entry_point}")
    reference = _code(sections["Reference"], "reference", entry_point)
    buggy = _code(sections["Buggy"], "buggy", entry_point) if sections.get("Buggy") else None
    try:
        suite = TestSuite(asserts=tests)
    except ValueError as e:
        raise TaskFormatError("test_syntax", str(e)) from e
    description = " ".join(sections["Description"].split())
    family = TaskFamily.REPAIR if buggy is not None else TaskFamily.CODEGEN
    return Task(task_id=task_id(description, signature, tests, reference, buggy),
                family=family, topic=topic, description=description, entry_point=entry_point,
                signature=signature, tests=suite, reference=reference, buggy=buggy,
                limits=limits, source=source, generator_version=generator_version)


def render_task(task: Task) -> str:
    """The inverse of parse_task (few-shot examples are rendered from seed tasks)."""
    parts = [f"Description: {task.description}", f"Signature: {task.signature}", "Tests:",
             *task.tests.asserts]
    if task.buggy is not None:
        parts += ["Buggy:", task.buggy.rstrip()]
    parts += ["Reference:", task.reference.rstrip()]
    return "\n".join(parts)


def task_id(description: str, signature: str, tests: tuple[str, ...], reference: str,
            buggy: str | None) -> str:
    """Content hash: the same task always has the same id (idempotent traces, dedup)."""
    blob = json.dumps([description, signature, list(tests), reference, buggy])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _sections(text: str) -> dict[str, str]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        match = _HEADER.match(line)
        if match and match.group(1) not in sections:
            current = match.group(1)
            sections[current] = [match.group(2)] if match.group(2) else []
        elif current is not None:
            sections[current].append(line)
    return {name: "\n".join(lines).strip("\n") for name, lines in sections.items()}


def _entry_point(signature: str) -> str:
    try:
        tree = ast.parse(signature + "\n    pass\n")
    except SyntaxError as e:
        raise TaskFormatError("bad_signature", f"{signature!r} is not a def line ({e.msg})") \
            from None
    node = tree.body[0] if tree.body else None
    if not isinstance(node, ast.FunctionDef):
        raise TaskFormatError("bad_signature", f"{signature!r} does not define a function")
    return node.name


def _code(source: str, what: str, entry_point: str) -> str:
    code = source.strip("\n") + "\n"
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        raise TaskFormatError(f"{what}_syntax", f"line {e.lineno}: {e.msg}") from None
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    if entry_point not in names:
        raise TaskFormatError(f"{what}_missing_entry_point", f"does not define {entry_point}")
    return code

