"""Executable tasks: the text format generators write, admission by execution, task families,
seeds.

Public API for other stages: `candidate_program` and `executable` (families.py: what a solver's
completion is, and what the sandbox runs for it), `split_program` (programs.py: the same
program on the learner's side) and `items_of` (guesses.py: an argument's items, which the
generator's reward reads to tell a guess among them).
"""

from spade_ray.tasks.families import candidate_program, executable
from spade_ray.tasks.guesses import items_of
from spade_ray.tasks.programs import split_program

__all__ = ["candidate_program", "executable", "items_of", "split_program"]
