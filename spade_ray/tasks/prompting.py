"""The generator's prompts: which topic, which family, which few-shot tasks.

Templates live in conf/prompts/ (templates.py renders them); the solver's prompts are per family
(families.py). The generator writes the same thing for every family (a program and inputs), so
its few-shot examples are distinct programs of the pool, rendered in the format it must write.
"""

from __future__ import annotations

import math
import random

from spade_ray.execution import canonical
from spade_ray.records import Task, TaskFamily
from spade_ray.tasks.format import call_text, render_proposal
from spade_ray.tasks.templates import PromptTemplate, render


def topic_schedule(topics: list[str], count: int, round_index: int) -> list[str]:
    """`count` topics with an even per-topic quota (ceil(count / topics)), rotated by round so
    every topic leads in turn."""
    if not topics:
        raise ValueError("the experiment lists no topics")
    quota = math.ceil(count / len(topics))
    start = round_index % len(topics)
    rotated = topics[start:] + topics[:start]
    return [t for t in rotated for _ in range(quota)][:count]


def family_schedule(families: list[TaskFamily], count: int, round_index: int
                    ) -> list[TaskFamily]:
    """The family of each of the round's `count` generator prompts: round-robin, starting one
    further each round."""
    if not families:
        raise ValueError("the experiment lists no task families")
    return [families[(round_index + i) % len(families)] for i in range(count)]


def generator_prompt(template: PromptTemplate, topic: str, pool: list[Task], shots: int,
                     rng: random.Random, tokenizer=None) -> str:
    """Few-shot programs of the pool (distinct references; the same topic first)."""
    programs = list({t.reference: t for t in pool if t.family is not TaskFamily.PREDICT
                     }.values())
    same_topic = [t for t in programs if t.topic == topic]
    others = [t for t in programs if t.topic != topic]
    chosen = (rng.sample(same_topic, min(shots, len(same_topic)))
              + rng.sample(others, max(0, min(shots - len(same_topic), len(others)))))
    examples = [{"topic": t.topic, "task": render_task(t)} for t in chosen]
    return render(template, examples, tokenizer, topic=topic)


def render_task(task: Task) -> str:
    """A task as the generator writes one: description, reference, the inputs of its examples."""
    calls = tuple(call_text(task.entry_point, canonical.decode(e.args))
                  for e in task.tests.examples)
    return render_proposal(task.description, task.reference, calls)
