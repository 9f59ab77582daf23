"""The run's archive of generated tasks (tasks/archive.py): what is replayed, what is kept."""

import dataclasses

from spade_ray.tasks.archive import replay_tasks, update_archive
from tests.tracking import factories as f


def tasks(prefix: str, count: int):
    return [dataclasses.replace(f.task(), task_id=f"{prefix}{i}") for i in range(count)]


def ids(chosen):
    return [t.task_id for t in chosen]


def test_replay_takes_the_newest_generated_tasks_first_then_rotates_the_seeds():
    seeds, archive = tasks("s", 5), tasks("a", 3)
    chosen, cursor = replay_tasks(seeds, archive, cursor=4, count=4)
    assert ids(chosen) == ["a2", "a1", "s4", "s0"] and cursor == 1
    chosen, cursor = replay_tasks(seeds, [], cursor=1, count=3)
    assert ids(chosen) == ["s1", "s2", "s3"] and cursor == 4
    assert replay_tasks(seeds, archive, 0, 0) == ([], 0)
    chosen, cursor = replay_tasks(seeds, archive, 0, 4, archive_share=0.75)
    assert ids(chosen) == ["a2", "a1", "a0", "s0"] and cursor == 1
    chosen, _ = replay_tasks(seeds, archive, 0, 4, archive_share=0.0)
    assert ids(chosen) == ["s0", "s1", "s2", "s3"]


def test_archive_keeps_the_last_distinct_tasks():
    old, new = tasks("a", 3), tasks("a", 2) + tasks("b", 2)
    assert ids(update_archive(old, new, 3)) == ["a2", "b0", "b1"]
