"""Collapse detection and rollback in real rounds, driven by scripted models (tests/scripted.py):
a generator whose learnt weights collapse into near-identical trivial tasks, and one that stays
healthy."""

import json
import re
import sqlite3

import pytest

from spade_ray import loop
from spade_ray.config import validate_loop
from spade_ray.execution import Sandbox
from spade_ray.tasks.control import ControlConfig
from spade_ray.tasks.format import render_proposal
from spade_ray.tasks.seeds import load_seed_proposals
from spade_ray.tracking.diagnose import CheckName, Level, diagnose, load_run
from tests.scripted import LIMITS, ScriptedEngines, run_scripted, scripted_loop

ROUNDS = 5
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(limits=LIMITS, workers=2) as sb:
        yield sb


def test_a_collapsing_generator_raises_the_alarm_and_is_rolled_back(sandbox, tmp_path):
    metrics, trainer, generator = run_scripted(sandbox, tmp_path, learns="collapsed")
    # round 0 serves the base ("healthy") weights; every update after it collapses
    alarmed = [m.round for m in metrics if m.collapse_alarm]
    # round 1: two kinds of evidence at once; round 3 shows one (the generator only repeats
    # the archive), round 4 the same again: an alarm within two rounds either way
    assert alarmed == [1, 4]
    assert [m.generator_rollback for m in metrics] == [None, 0, None, None, 3]
    assert trainer.rollbacks == [("ckpt-0", 0), ("ckpt-0", 3)]
    assert [m.hard_tasks_injected for m in metrics] == [0, 0, 2, 0, 0]
    assert metrics[2].generator_version == 3 and not metrics[2].collapse_evidence
    assert generator.weights == "healthy"  # what serves after the last rollback
    kinds = {e.split(":")[0] for e in metrics[1].collapse_alarm}
    assert {"repetition", "too_easy"} <= kinds


def test_a_healthy_generator_never_raises_the_alarm(sandbox, tmp_path):
    metrics, trainer, _ = run_scripted(sandbox, tmp_path, learns="healthy")
    assert [m.collapse_evidence for m in metrics] == [()] * ROUNDS
    assert trainer.rollbacks == [] and all(m.tasks_valid > 0 for m in metrics)
    assert all(m.difficulty_band == (0.3, 0.7) for m in metrics)
    assert all(0.3 <= m.new_task_pass_rate <= 0.7 for m in metrics)


def test_the_hint_lever_shows_the_solver_fewer_examples_as_tasks_get_too_easy(sandbox, tmp_path):
    # the collapsed generator's tasks are solved every time: the level rises, the hints fall
    # (in the prompts of the replayed seeds too: their pairs show it)
    metrics, _, _ = run_scripted(sandbox, tmp_path, learns="collapsed", rounds=3,
                                 control=ControlConfig(hint_step=1, collapse_detection=False),
                                 replay_tasks_per_round=2)
    assert [m.control_level for m in metrics] == [0, 0, 1]  # round 0 serves healthy weights
    assert [m.solver_hints for m in metrics] == [2, 2, 1]
    db = sqlite3.connect(tmp_path / "trace.sqlite")
    shown = {}  # round -> examples shown of the task each pair's prompt asks
    for round_index, prompt in db.execute("SELECT round, prompt FROM pairs WHERE role='solver'"):
        if "### Task\n" in prompt:  # codegen and repair (predict shows one call)
            task = re.split("### (?:Solution|Buggy)", prompt.rsplit("### Task\n", 1)[1])[0]
            shown.setdefault(round_index, set()).add(len(re.findall(r"^\w+\(.*\) == ", task,
                                                                    re.MULTILINE)))
    assert shown[0] == shown[1] == {2} and shown[2] == {1}
    assert json.loads(db.execute("SELECT metrics FROM rounds WHERE round=2").fetchone()[0])[
        "solver_hints"] == 1
    # what a prompt showed earned no credit, and diagnose re-scores each round with its hints
    rescore = diagnose(load_run(tmp_path)).section("evaluator").checks[0]
    assert rescore.name is CheckName.RESCORE and rescore.level is Level.OK, rescore


def copies_paid(sandbox, tmp_path, order: list[int], rounds: int, archive_size: int):
    """The generator outputs of rounds that write seed tasks 3, 4... in `order` (two a round,
    one chunk each), as (round, (outcome, reward)) per output; the solver's draws are right
    about half the time, a pass rate the generator's reward pays for."""
    proposals = [p for _, p in load_seed_proposals() if p.reference.startswith("def ")][3:]
    texts = iter(render_proposal(proposals[i].description, proposals[i].reference,
                                 proposals[i].calls) for i in order)
    references = {p.signature: p.reference for p in proposals}
    generator = ScriptedEngines("generator", lambda _w, _p, _k: next(texts))
    solver = ScriptedEngines("solver", lambda _w, prompt, k: (
        references[prompt.rstrip().rsplit("\n", 1)[-1]].split("\n", 1)[1] if k < 2
        else f"    return {k}\n"))
    config = validate_loop({"rounds": rounds, "tasks_per_round": 2, "chunk_size": 1,
                            "candidates": 4, "topics": ["strings"], "families": ["codegen"],
                            "frame_tokens": 0, "archive_size": archive_size})
    with scripted_loop(sandbox, tmp_path, generator, solver, config, control=ControlConfig(),
                       outputs_per_prompt=1, few_shot=(0, 0)) as (run, store):
        loop.run_rounds(run)
        return [(r, (i.outcome, i.reward)) for r in range(rounds)
                for i in store.generator_inputs(r)]


def test_a_task_is_paid_once_per_run_however_it_is_written_again(sandbox, tmp_path):
    # Red-team pass 10: a task written in two chunks of one round was admitted (and paid 1.0)
    # twice, each chunk checking against the round's start; and once it had left the archive
    # (archive_size 2), again. Now the second writing is a duplicate, paid -1.
    paid = copies_paid(sandbox, tmp_path / "chunks", [0, 0], rounds=1, archive_size=200)
    assert [outcome for _, outcome in paid][1] == ("duplicate", -1.0)
    assert paid[0][1][0] == "admitted" and paid[0][1][1] > 0
    paid = copies_paid(sandbox, tmp_path / "archive", [0, 1, 2, 3, 0, 4], rounds=3,
                       archive_size=2)
    assert [outcome for _, (outcome, _) in paid] == ["admitted"] * 4 + ["duplicate", "admitted"]
