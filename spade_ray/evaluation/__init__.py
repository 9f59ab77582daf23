"""Evaluation: scoring rules for candidates (scoring.py, measured from what a program earns
without solving its task: baselines.py) and the fixed validation set (humaneval.py, never mixed
with generated tasks).

    from spade_ray.evaluation import score, compare
    s = score(candidate, sandbox.check(candidate.code, task.tests))
"""

from spade_ray.evaluation.baselines import hardest_examples, null_credit
from spade_ray.evaluation.scoring import (
    IncomparableScores,
    SandboxFailure,
    compare,
    needs_rerun,
    rank_key,
    score,
    score_many,
)

__all__ = ["IncomparableScores", "SandboxFailure", "compare", "hardest_examples", "needs_rerun",
           "null_credit", "rank_key", "score", "score_many"]
