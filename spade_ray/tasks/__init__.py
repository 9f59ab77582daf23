"""Executable tasks: the text format generators write, parsing, validation by execution, seeds.

Public API for other stages: `candidate_program` and `split_program` (programs.py), what a
candidate program is, on the solver's side and on the learner's.
"""

from spade_ray.tasks.programs import candidate_program, split_program

__all__ = ["candidate_program", "split_program"]
