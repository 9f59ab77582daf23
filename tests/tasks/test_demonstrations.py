"""The SFT warm start's demonstrations, built from the admitted seed pool."""

from spade_ray.records import Role, TaskFamily
from spade_ray.tasks.demonstrations import (
    GENERATOR_END,
    SOLVER_END,
    continues_signature,
    seed_demonstrations,
)
from spade_ray.tasks.format import parse_proposal
from spade_ray.tasks.programs import split_program
from spade_ray.tasks.templates import load_prompts

TEMPLATES = load_prompts("fewshot")


def build(seeds, roles=(Role.SOLVER, Role.GENERATOR)):
    return seed_demonstrations(seeds, TEMPLATES, 2, 4, roles, seed=0)


def test_every_seed_task_teaches_the_solver_and_every_seed_program_the_generator(seeds):
    demos = build(seeds)
    solver = [d for d in demos if d.role is Role.SOLVER]
    generator = [d for d in demos if d.role is Role.GENERATOR]
    continuing = [t.task_id for t in seeds if continues_signature(t)]
    assert [d.task_id for d in solver] == continuing and len(continuing) > 0.8 * len(seeds)
    assert len(generator) == len({t.reference for t in seeds
                                  if t.family is not TaskFamily.PREDICT}) > 10
    assert [d.role for d in build(seeds, (Role.SOLVER,))] == [Role.SOLVER] * len(continuing)


def test_no_prompt_shows_its_own_answer(seeds):
    by_id = {t.task_id: t for t in seeds}
    for demo in build(seeds):
        task = by_id[demo.task_id]
        if task.family is not TaskFamily.PREDICT:  # a predict prompt shows the program itself
            assert task.reference.strip() not in demo.prompt, demo.task_id


def test_a_solver_program_continues_its_prompt_and_ends_where_the_next_entry_starts(seeds):
    by_id = {t.task_id: t for t in seeds}
    for demo in build(seeds, (Role.SOLVER,)):
        assert demo.completion.endswith(SOLVER_END)
        context, _ = split_program(demo.prompt, demo.completion)
        if by_id[demo.task_id].family is not TaskFamily.PREDICT:
            assert context != demo.prompt  # the signature line is the completion's, not doubled


def test_a_generator_answer_parses_back_into_its_seed_program(seeds):
    by_id = {t.task_id: t for t in seeds}
    for demo in build(seeds, (Role.GENERATOR,)):
        assert demo.completion.endswith(GENERATOR_END)
        proposal = parse_proposal(demo.completion[:-len(GENERATOR_END)])
        assert proposal.reference.strip() == by_id[demo.task_id].reference.strip()
