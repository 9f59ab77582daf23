"""The task an admitted proposal makes: the suite that grades it and, per family, what its
prompt shows and what a candidate answers (admission.py decides whether it is one).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence

from spade_ray.execution import canonical
from spade_ray.records import IOExample, Limits, Task, TaskFamily, TaskSource, TestSuite
from spade_ray.tasks.format import Proposal
from spade_ray.tasks.guesses import FLOAT_TOLERANCE

PREDICT_ENTRY = "answer"  # the function a predict candidate defines (families.py)


def suite_of(examples: Sequence[IOExample], entry_point: str) -> TestSuite:
    """The examples as the suite that grades them (the reference's and the mutants' checks
    too). A float answer depends on the order of its operations, which no description states:
    of five right means (fsum, fmean, sum / len, a loop, statistics.mean) two passed exactly,
    so a task with float answers compares them with FLOAT_TOLERANCE."""
    floats = any(_holds_float(canonical.decode(e.expected)) for e in examples)
    return TestSuite(examples=tuple(examples), entry_point=entry_point,
                     float_tolerance=FLOAT_TOLERANCE if floats else 0.0)


def _holds_float(value) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is float:
            return True
        if type(item) in (list, tuple, set, frozenset):
            stack.extend(item)
        elif type(item) is dict:
            stack.extend(item.values())
    return False


def make_task(p: Proposal, family: TaskFamily, topic: str, examples: tuple[IOExample, ...],
              asked: int, buggy: str | None, limits: Limits, visible_examples: int,
              source: TaskSource, generator_version: int) -> Task:
    """The task of `family` made of an admitted proposal and its examples (the first
    `visible_examples` shown; a predict task asks `examples[asked]`, one of the generator's
    own inputs)."""
    suite = suite_of(examples, p.entry_point)
    visible = examples[:visible_examples]
    if family is TaskFamily.PREDICT:
        # The answer is the output as data, returned by the candidate's `answer()`.
        question = examples[asked]
        visible = (question,)
        suite = TestSuite(examples=(IOExample(args=canonical.encode(()),
                                              expected=question.expected),),
                          entry_point=PREDICT_ENTRY, float_tolerance=suite.float_tolerance)
    blob = json.dumps([family, p.description, p.reference, [dataclasses.astuple(e)
                                                             for e in suite.examples], buggy])
    return Task(task_id=hashlib.sha256(blob.encode()).hexdigest()[:16], family=family,
                topic=topic, description=p.description, entry_point=p.entry_point,
                signature=p.signature, tests=suite, reference=p.reference, buggy=buggy,
                visible=visible, limits=limits, source=source,
                generator_version=generator_version)
