"""The SFT warm start's data: what each role should have written for the seed pool's tasks.

Seed 7.3 of the design: supervised fine-tuning first, then preference learning. A base model
this small writes the task format and solutions badly before it has seen them as targets; the
warm start shows it, once, the prompts it will meet in the rounds (the same templates and
few-shot choice) with the seed pool's own answers:
  solver     for every admitted seed task (each family), the family's prompt with other seeds as
             the few-shot examples, and the task's solution (the reference, or the predicted
             value), ended where the next entry of the prompt would start
  generator  for every distinct seed program, a generator prompt on its topic with other seed
             programs as the examples, and the program's task in the format the generator writes
             (description, reference, inputs), ended with the format's end marker
A task never appears among its own prompt's examples, so the targets are not copied from the
prompt.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from spade_ray.records import Demonstration, Role, Task, TaskFamily
from spade_ray.tasks.families import solution, solver_prompt
from spade_ray.tasks.prompting import generator_prompt, render_task
from spade_ray.tasks.templates import PromptTemplate

# Where an answer ends in the few-shot document: the next entry's header (the solver's stop
# strings and the generator's "### END" marker, conf/model/*.yaml), so the model learns to stop.
SOLVER_END = "\n###"
GENERATOR_END = "\n### END"


def seed_demonstrations(seeds: Sequence[Task], templates: dict[str, PromptTemplate],
                        solver_shots: int, generator_shots: int, roles: Sequence[Role],
                        seed: int = 0) -> list[Demonstration]:
    """The warm start's demonstrations of `roles` on `seeds` (module docstring)."""
    if not seeds:
        raise ValueError("the SFT warm start needs seed tasks; the seed pool admitted none")
    demonstrations = []
    if Role.SOLVER in roles:
        demonstrations += [_solver(t, seeds, templates, solver_shots) for t in seeds
                           if templates[t.family].chat or continues_signature(t)]
    if Role.GENERATOR in roles:
        rng = random.Random(seed)
        programs = {t.reference: t for t in seeds if t.family is not TaskFamily.PREDICT}
        for task in programs.values():
            others = [t for t in seeds if t.reference != task.reference]
            prompt = generator_prompt(templates["generator"], task.topic, others,
                                      generator_shots, rng)
            demonstrations.append(Demonstration(task.task_id, prompt,
                                                render_task(task) + GENERATOR_END,
                                                Role.GENERATOR))
    return demonstrations


def continues_signature(task: Task) -> bool:
    """Whether a base model could write the task's solution after its prompt, which ends with
    the signature: a reference with lines above it (an import, a helper) is no continuation of
    it and is left out of the solver's demonstrations (a chat model writes a whole block)."""
    return (task.family is TaskFamily.PREDICT
            or task.reference.lstrip().startswith(task.signature))


def _solver(task: Task, seeds: Sequence[Task], templates: dict[str, PromptTemplate],
            shots: int) -> Demonstration:
    prompt = solver_prompt(templates, task, list(seeds), shots)
    answer = solution(task).rstrip()
    if templates[task.family].chat:
        answer = f"```python\n{answer}\n```" if task.family is not TaskFamily.PREDICT else answer
        return Demonstration(task.task_id, prompt, answer, Role.SOLVER)
    return Demonstration(task.task_id, prompt, answer + SOLVER_END, Role.SOLVER)
