"""The run's archive of generated tasks: what each round replays beside its new tasks (archive
first, then seeds in rotation), and what the archive keeps."""

from __future__ import annotations

import math
from collections.abc import Sequence

from spade_ray.records import Task


def replay_tasks(seeds: Sequence[Task], archive: Sequence[Task], cursor: int, count: int,
                 archive_share: float = 0.5) -> tuple[list[Task], int]:
    """The tasks the solver also attempts this round, besides the new ones: up to
    `archive_share` of `count` (rounded up) from the archive of this run's generated tasks (the
    newest first: they are the generator's, and pairs on them are self-play's), the rest
    rotating through the seeds; the tasks and the next round's seed cursor."""
    from_archive = list(reversed(archive))[:math.ceil(count * archive_share)]
    count = min(count - len(from_archive), len(seeds))
    chosen = [seeds[(cursor + i) % len(seeds)] for i in range(count)]
    return from_archive + chosen, (cursor + count) % max(1, len(seeds))


def update_archive(archive: Sequence[Task], new: Sequence[Task], size: int) -> tuple[Task, ...]:
    """The last `size` distinct tasks of archive + new."""
    seen, merged = set(), []
    for task in [*archive, *new]:
        if task.task_id not in seen:
            seen.add(task.task_id)
            merged.append(task)
    return tuple(merged[-size:]) if size else ()
