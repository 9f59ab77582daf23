"""Prompts for the two roles, and turning their completions back into tasks and programs.

Templates live in conf/prompts/ (templates.py renders them); this module decides what goes
into them: which topic, which few-shot examples, how a repair task shows its buggy program
(programs.py turns a completion into the candidate program).
"""

from __future__ import annotations

import math
import random

from spade_ray.records import Task
from spade_ray.tasks.format import render_task
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


def generator_prompt(template: PromptTemplate, topic: str, pool: list[Task], shots: int,
                     rng: random.Random, tokenizer=None) -> str:
    same_topic = [t for t in pool if t.topic == topic]
    others = [t for t in pool if t.topic != topic]
    chosen = (rng.sample(same_topic, min(shots, len(same_topic)))
              + rng.sample(others, max(0, min(shots - len(same_topic), len(others)))))
    examples = [{"topic": t.topic, "task": render_task(t)} for t in chosen]
    return render(template, examples, tokenizer, topic=topic)


def solver_prompt(template: PromptTemplate, task: Task, examples: list[Task], shots: int,
                  tokenizer=None) -> str:
    """The first `shots` examples other than the task itself (a replayed seed task must not
    show its own solution)."""
    chosen = [t for t in examples if t.task_id != task.task_id][:shots]
    shown = [{"description": _shown_description(t), "solution": t.reference.rstrip()}
             for t in chosen]
    return render(template, shown, tokenizer, description=_shown_description(task),
                  signature=task.signature)


def _shown_description(task: Task) -> str:
    if task.buggy is None:
        return task.description
    return f"{task.description}\n{task.buggy.rstrip()}"
