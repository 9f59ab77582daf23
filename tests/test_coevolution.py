"""Collapse detection and rollback in real rounds, driven by scripted models (tests/scripted.py):
a generator whose learnt weights collapse into near-identical trivial tasks, and one that stays
healthy."""

import pytest

from spade_ray.execution import Sandbox
from tests.scripted import LIMITS, run_scripted

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
