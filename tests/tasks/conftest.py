"""Fixtures for the task tests: one sandbox per module, the seed pool admitted once."""

import pytest

from spade_ray.execution import Sandbox
from spade_ray.records import Limits
from spade_ray.tasks.seeds import load_seed_tasks

LIMITS = Limits(timeout_s=5, cpu_s=5)


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(limits=LIMITS, workers=2) as sb:
        yield sb


@pytest.fixture(scope="session")
def seeds():
    with Sandbox(limits=LIMITS, workers=2) as sb:
        return load_seed_tasks(sb, LIMITS)
