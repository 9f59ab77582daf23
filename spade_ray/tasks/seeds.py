"""The seed pool shipped with the project: programs and inputs in the generator's own format,
admitted by the same code as generated ones and made into a task of every family. They are the
few-shot examples of both roles and the first rounds' tasks while the generator is still weak.

Admitting the pool runs ~1,000 sandbox checks (references on their own and augmented inputs,
null solvers, mutants: ~60 s on two cores, ~26 s before seeds were augmented), so the admitted
tasks are cached under $SPADE_CACHE/seed_tasks/, keyed by everything they depend on: the seed
file, the limits, the admission settings and the sources of the code that admits them
(`_SOURCES`). Any change to one of those admits the pool again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

from spade_ray.execution import canonical
from spade_ray.records import Limits, Task, TaskFamily, TaskSource, from_dict, to_dict
from spade_ray.tasks import admission
from spade_ray.tasks.admission import AdmissionConfig, admit
from spade_ray.tasks.format import Proposal, parse_proposal

SEED_FILE = Path(__file__).with_name("seed_tasks.txt")
CACHE_DIR = Path(os.environ.get("SPADE_CACHE", Path.home() / ".cache" / "spade-ray")) / \
    "seed_tasks"
# What an admitted seed depends on, as whole packages rather than a list of modules (a list
# missed augment.py and imports.py, so a change to either served a stale pool): every package
# this module imports (tests/tasks/test_seeds.py checks it) and the jail's code (the harness
# and grader that check a reference, the codec). A change anywhere in them costs one
# admission (~60 s).
_PACKAGE = Path(__file__).parents[1]
_SOURCES = (_PACKAGE / "__init__.py", *(_PACKAGE / name for name in
                                        ("tasks", "records", "execution", "evaluation")),
            Path(canonical.SOURCE).parent)
_BLOCK = re.compile(r"^### Topic:([^\n]*)\n(.*?)^### END$", re.MULTILINE | re.DOTALL)
_HEADER = re.compile(r"^### Topic:([^\n]*)", re.MULTILINE)
_END = re.compile(r"^### END$", re.MULTILINE)


def load_seed_proposals(path: Path = SEED_FILE) -> list[tuple[str, Proposal]]:
    """(topic, proposal) of every block of the seed file; a block that does not parse is an
    error naming it. So is a block without its `### END` line: the next block's text (or the
    end of the file) was taken as its own, and a seed was silently lost."""
    try:  # utf-8-sig: with a BOM (an editor's), the first header was not at a line start
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text: {e}") from e
    blocks = _BLOCK.findall(text)
    headers = list(_HEADER.finditer(text))
    if len(headers) != len(blocks):
        nexts = [m.start() for m in headers[1:]] + [len(text)]
        for n, header in enumerate(headers):
            if not _END.search(text, header.end(), nexts[n]):
                line = text.count("\n", 0, header.start()) + 1
                raise ValueError(f"{path}: {len(headers)} topics but {len(blocks)} complete "
                                 f"blocks; block {n} ({header[1].strip()}, line {line}) has no "
                                 "'### END' line before the next '### Topic:' or the end of "
                                 "the file")
    outside = _BLOCK.sub("", text).strip()  # e.g. a block whose header was mistyped: lost
    if outside:
        raise ValueError(f"{path}: text outside every '### Topic: ... ### END' block: "
                         f"{outside.splitlines()[0]!r:.80}")
    if not blocks:
        raise ValueError(f"no '### Topic: ... ### END' blocks in {path}")
    out = []
    for n, (topic, body) in enumerate(blocks):
        if not topic.strip():
            raise ValueError(f"{path}: seed block {n} has no topic after '### Topic:'")
        try:
            out.append((topic.strip(), parse_proposal(body)))
        except ValueError as e:
            raise ValueError(f"{path}: seed block {n} ({topic.strip()}): {e}") from e
    return out


def load_seed_tasks(executor, limits: Limits = Limits(),
                    config: AdmissionConfig = AdmissionConfig(), path: Path = SEED_FILE,
                    cache_dir: Path | None = CACHE_DIR) -> list[Task]:
    """Every seed as a task of every family it makes (_not_this_family), admitted in the
    sandbox or read from the cache. A seed that fails admission otherwise is an error: the
    shipped pool must be valid."""
    cached = None if cache_dir is None else cache_dir / f"{_key(path, limits, config)}.json"
    if cached is not None and cached.is_file():
        try:
            return [from_dict(Task, d) for d in json.loads(cached.read_text())]
        except (ValueError, TypeError, KeyError):
            pass  # a damaged cache file is replaced below
    tasks = admit_seeds(executor, limits, config, path)
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=cached.parent, delete=False) as f:
            json.dump([to_dict(t) for t in tasks], f)
        os.replace(f.name, cached)
    return tasks


def admit_seeds(executor, limits: Limits, config: AdmissionConfig, path: Path = SEED_FILE
                ) -> list[Task]:
    seeds = load_seed_proposals(path)
    jobs = [(topic, proposal, family) for topic, proposal in seeds for family in TaskFamily]
    verdicts = admit([p for _, p, _ in jobs], [f for _, _, f in jobs], [t for t, _, _ in jobs],
                     executor, limits, config, source=TaskSource.SEED)
    failed = [f"{v.proposal.entry_point} as {v.family}: {v.reason}" for v in verdicts
              if not v.valid and not _not_this_family(v)]
    if failed:
        raise ValueError(f"{path}: {len(failed)} seed task(s) not admitted: "
                         + "; ".join(failed))
    return [v.task for v in verdicts if v.task is not None]


def _not_this_family(v: admission.Admitted) -> bool:
    """A seed need not make a task of every family: repair needs a mutant its examples catch,
    predict an answer that no guess states (a seed answering True or False is a codegen task,
    not a question). A null solver that passes the whole suite fails its codegen task too."""
    return v.reason == "no_killed_mutant" or (
        v.family is TaskFamily.PREDICT and v.reason.startswith("trivial_passes:"))


def source_files() -> list[Path]:
    """The files of `_SOURCES`: the Python sources of its directories, and its files."""
    return sorted(f for s in _SOURCES for f in (s.glob("*.py") if s.is_dir() else [s]))


def _key(path: Path, limits: Limits, config: AdmissionConfig) -> str:
    digest = hashlib.sha256(path.read_bytes())
    for source in source_files():
        digest.update(source.read_bytes())
    digest.update(json.dumps([dataclasses.asdict(limits), dataclasses.asdict(config)],
                             sort_keys=True).encode())
    return digest.hexdigest()[:20]
