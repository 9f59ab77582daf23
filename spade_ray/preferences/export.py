"""Export a round's preference pairs: crash-safe JSONL, and a `datasets` Dataset for TRL.

JSONL: one `to_dict(PreferencePair)` object per line (prompt, chosen, rejected + metadata),
appended with one write, then flush + fsync, so after a crash every line but possibly the last is
whole. A last line without its newline is the mark of a killed writer: `read_jsonl` ignores it
and `append_jsonl` cuts it off before appending, so it never glues onto a good line. A broken line
anywhere else is real corruption and an error.

Dataset: columns prompt / chosen / rejected (TRL DPOTrainer's "standard" preference format) plus
the metadata columns, saved with `save_to_disk` into a temp directory renamed into place, so a
reader never sees half a dataset.

Non-goals: chat-formatted (message list) pairs, deduplication across rounds, pushing to a hub.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spade_ray.records import PreferencePair, from_dict, to_dict

TRL_COLUMNS = ("prompt", "chosen", "rejected")
_TAIL_CHUNK = 1 << 16


def append_jsonl(path: str | Path, pairs: Sequence[PreferencePair]) -> int:
    """Append `pairs` to `path` (created if missing) durably; returns the partial-tail bytes
    that a killed earlier writer had left and that were cut off first (0 normally)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    created = not path.exists()
    data = b"".join(json.dumps(to_dict(p)).encode("ascii") + b"\n" for p in pairs)
    with open(path, "ab+") as f:  # appends always land at the end, after any truncation
        dropped = _drop_partial_tail(f)
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if created:
        _fsync_dir(path.parent)  # the new file's directory entry must survive a crash too
    return dropped


def read_jsonl(path: str | Path) -> list[PreferencePair]:
    """The pairs in `path`, ignoring a partial last line left by a killed writer."""
    path = Path(path)
    lines = path.read_bytes().split(b"\n")
    # After the last newline: b"" for a clean file, else a line its writer never finished.
    whole = lines[:-1]
    pairs = []
    for number, line in enumerate(whole, start=1):
        try:
            pairs.append(from_dict(PreferencePair, json.loads(line)))
        except (ValueError, TypeError) as e:
            raise ValueError(f"{path}:{number} is not a valid preference pair ({e}); only the "
                             "last line may be partial, so this file is corrupt") from e
    return pairs


def to_dataset(pairs: Sequence[PreferencePair]) -> Any:
    """A `datasets.Dataset` with the TRL columns first, then the metadata columns."""
    # Imported here: `datasets` costs ~1 s to import and only this export needs it.
    import datasets

    features = datasets.Features({
        "prompt": datasets.Value("string"), "chosen": datasets.Value("string"),
        "rejected": datasets.Value("string"), "task_id": datasets.Value("string"),
        "chosen_candidate_id": datasets.Value("string"),
        "rejected_candidate_id": datasets.Value("string"),
        "chosen_score": datasets.Value("float64"), "rejected_score": datasets.Value("float64"),
        "solver_version": datasets.Value("int64"), "generator_version": datasets.Value("int64"),
    })
    rows = [to_dict(p) for p in pairs]
    # Explicit features keep the columns (and TRL's view of them) even for a round with no pairs.
    return datasets.Dataset.from_dict({name: [r[name] for r in rows] for name in features},
                                      features=features)


def save_dataset(pairs: Sequence[PreferencePair], directory: str | Path) -> Path:
    """Save the pairs with `save_to_disk` at `directory`, replacing what was there atomically."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        # datasets 5.2 writes zero shards for zero rows, which load_from_disk then fails to
        # read (IndexError); one empty shard loads as an empty dataset.
        to_dataset(pairs).save_to_disk(str(tmp), num_shards=None if pairs else 1)
        if directory.exists():
            # rename() cannot replace a non-empty directory: move the old one aside first.
            old = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old.", dir=directory.parent))
            os.replace(directory, old / "data")
            os.replace(tmp, directory)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _fsync_dir(directory.parent)
    return directory


def _drop_partial_tail(f: Any) -> int:
    """Truncate `f` after its last newline; returns how many bytes were cut."""
    size = f.seek(0, os.SEEK_END)
    end = size
    while end > 0:
        start = max(0, end - _TAIL_CHUNK)
        f.seek(start)
        newline = f.read(end - start).rfind(b"\n")
        if newline >= 0:
            keep = start + newline + 1
            break
        end = start
    else:
        keep = 0
    if keep < size:
        f.truncate(keep)
    return size - keep


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
