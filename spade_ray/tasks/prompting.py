"""The generator's prompts: which topic, which family, which few-shot tasks.

Templates live in conf/prompts/ (templates.py renders them); the solver's prompts are per family
(families.py). The generator writes the same thing for every family (a program and inputs), so
its few-shot examples are distinct programs of the pool, rendered in the format it must write.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence

from spade_ray.execution import canonical
from spade_ray.records import Task, TaskFamily
from spade_ray.tasks.control import Guidance, difficulty_label, rank_exemplars
from spade_ray.tasks.format import call_text, only_code, render_proposal, shown_program
from spade_ray.tasks.templates import PromptTemplate, render

SHOWN_INPUTS = 6  # the seed pool's programs have 4 to 6 inputs


def topic_schedule(topics: list[str], count: int, round_index: int,
                   admitted: Mapping[str, int] | None = None,
                   max_share: float = math.inf) -> list[str]:
    """`count` topics with an even per-topic quota (ceil(count / topics)), rotated by round so
    every topic leads in turn. A topic holding more than `max_share` fair shares of the
    `admitted` tasks so far (topic -> count) sits out the round: forced switching, so one
    topic the generator finds easy cannot fill the archive."""
    if not topics:
        raise ValueError("the experiment lists no topics")
    admitted = admitted or {}
    fair = sum(admitted.get(t, 0) for t in topics) / len(topics)
    topics = [t for t in topics if admitted.get(t, 0) <= max_share * fair] or topics
    quota = math.ceil(count / len(topics))
    start = round_index % len(topics)
    rotated = topics[start:] + topics[:start]
    return [t for t in rotated for _ in range(quota)][:count]


def family_schedule(families: list[TaskFamily], count: int, round_index: int,
                    weights: Sequence[float] | None = None) -> list[TaskFamily]:
    """The family of each of the round's `count` generator prompts: round-robin, starting one
    further each round; with `weights` (one per family), each family's share of the prompts
    follows its weight (largest remainder), in the same rotating order."""
    if not families:
        raise ValueError("the experiment lists no task families")
    order = [families[(round_index + i) % len(families)] for i in range(len(families))]
    if weights is None:
        return [order[i % len(order)] for i in range(count)]
    weight = dict(zip(families, weights))
    quotas = {f: count * weight[f] / sum(weights) for f in order}
    slots = {f: int(q) for f, q in quotas.items()}
    for f in sorted(order, key=lambda f: slots[f] - quotas[f])[:count - sum(slots.values())]:
        slots[f] += 1  # the largest remainders
    out: list[TaskFamily] = []
    while len(out) < count:  # interleaved: a chunk of prompts mixes the families
        out += [f for f in order if sum(g is f for g in out) < slots[f]][:count - len(out)]
    return out


def generator_prompt(template: PromptTemplate, topic: str, pool: list[Task], shots: int,
                     rng: random.Random, tokenizer=None, guidance: Guidance = Guidance()
                     ) -> str:
    """Few-shot programs of the pool (distinct references): the same topic first, then (with
    a target) the measured pass rate closest to the guidance's target. With a difficulty, each
    program's topic line carries its measured difficulty and the asked-for one the target's
    (tasks/control.py)."""
    programs = list({t.reference: t for t in pool if t.family is not TaskFamily.PREDICT
                     }.values())
    rates = _rates_by_reference(pool, guidance.pass_rates)
    by_id = {t.task_id: rates[t.reference] for t in programs if t.reference in rates}
    chosen = rank_exemplars(programs, topic, guidance.target, by_id,
                            [rng.random() for _ in programs])[:shots]
    if guidance.difficulty is None:
        examples = [{"topic": t.topic, "task": render_task(t)} for t in chosen]
        return render(template, examples, tokenizer, topic=topic)
    examples = [{"topic": f"{t.topic} ({difficulty_label(by_id.get(t.task_id))})",
                 "task": render_task(t)} for t in chosen]
    return render(template, examples, tokenizer, topic=f"{topic} ({guidance.difficulty})")


def _rates_by_reference(pool: list[Task], pass_rates: Mapping[str, float]) -> dict[str, float]:
    """The mean measured pass rate of each reference over its tasks (a seed program is a
    codegen, a repair and a predict task, each measured on its own)."""
    rates: dict[str, list[float]] = {}
    for task in pool:
        if task.task_id in pass_rates:
            rates.setdefault(task.reference, []).append(pass_rates[task.task_id])
    return {ref: sum(r) / len(r) for ref, r in rates.items()}


def render_task(task: Task) -> str:
    """A task as the generator writes one: description, reference, the inputs of its first
    SHOWN_INPUTS examples (the generator's own come first; the augmented ones are not its
    writing to copy). An admitted task is an exemplar of every later round, and its comments
    and strings held forged `### END` / `### Topic` entries, with a difficulty label of the
    generator's choosing (red-team pass 15, F3): a reference with any of them is shown as
    format.shown_program writes it; one whose every line is code (the seed pool's) as written,
    in the spelling the generator copies."""
    calls = tuple(call_text(task.entry_point, canonical.decode(e.args))
                  for e in task.tests.examples[:SHOWN_INPUTS])
    reference = task.reference if only_code(task.reference) else shown_program(task.reference)
    return render_proposal(task.description, reference, calls)
