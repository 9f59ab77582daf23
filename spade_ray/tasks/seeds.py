"""The seed pool shipped with the project: valid tasks of every family, few-shot examples for
the generator and the solver, and the first round's tasks while the generator is still weak."""

from __future__ import annotations

import re
from pathlib import Path

from spade_ray.records import Limits, Task, TaskSource
from spade_ray.tasks.format import parse_task

SEED_FILE = Path(__file__).with_name("seed_tasks.txt")
_BLOCK = re.compile(r"^### Topic: (.+?)\n(.*?)^### END$", re.MULTILINE | re.DOTALL)


def load_seed_tasks(limits: Limits = Limits(), path: Path = SEED_FILE) -> list[Task]:
    text = path.read_text(encoding="utf-8")
    tasks = [parse_task(body, topic.strip(), limits, source=TaskSource.SEED)
             for topic, body in _BLOCK.findall(text)]
    if not tasks:
        raise ValueError(f"no '### Topic: ... ### END' blocks in {path}")
    return tasks
