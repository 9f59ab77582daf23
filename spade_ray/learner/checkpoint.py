"""Checkpoint files: an atomic directory, RNG states, the learner's own small state.

Layout of a learner checkpoint (written by Learner.save_checkpoint):
  learner.json        format version, step, algorithm, how the policy is built (PPO: which
                      critic), the buffered items not yet trained on (a resumed run trains on
                      them as the killed one would have)
  rng.pt              python, numpy and torch RNG states (rank 0; rank r > 0: rng.rank<r>.pt)
  policy/             LoRA adapters (peft's adapter_model.safetensors + adapter_config.json;
                      PPO's critic adapter in policy/critic/) or the full weights
                      (model.safetensors); for reading, not for resuming: the engine's state
                      below holds every trained weight, PPO's value head and critic included
  merged/             optional: an HF model directory of the merged weights + tokenizer
  optimizer.pt        torch engine: trainable weights (float32), optimizer and scheduler state
  deepspeed/engine/   DeepSpeed engine: its own checkpoint (trainable weights, ZeRO optimizer
                      partitions with fp32 master weights, one per rank, scheduler)
The directory appears whole or not at all: it is written into a sibling temp directory and
renamed into place; an existing checkpoint of the same name is replaced only after the new one
is complete. With several ranks (a shared filesystem, as DeepSpeed's own checkpoints need) rank 0
makes the temp directory, every rank writes its part, and rank 0 renames it once all are done.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from spade_ray.learner.engines import Ranks

FORMAT_VERSION = 1


@contextlib.contextmanager
def atomic_directory(target: Path, ranks: Ranks | None = None) -> Iterator[Path]:
    """Yield a temp dir next to `target`; on success it becomes `target` (replacing one).
    Every rank of `ranks` enters with the same `target` and gets the same temp dir."""
    target, ranks = Path(target), ranks or Ranks()
    tmp = None
    if ranks.rank == 0:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".{target.name}-tmp-", dir=target.parent)
    tmp = Path(ranks.broadcast(tmp))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    ranks.barrier()  # every rank's part is written
    if ranks.rank != 0:
        return
    old = None
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}-old-", dir=target.parent))
        target.rename(old / target.name)
    tmp.rename(target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def rng_file(rank: int) -> str:
    return "rng.pt" if rank == 0 else f"rng.rank{rank}.pt"


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy

        state["numpy"] = numpy.random.get_state()
    except ImportError:
        pass
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        import numpy

        numpy.random.set_state(state["numpy"])


def write_meta(directory: Path, meta: dict[str, Any]) -> None:
    (directory / "learner.json").write_text(json.dumps({"format_version": FORMAT_VERSION,
                                                        **meta}, indent=1))


def read_meta(directory: Path, expected: dict[str, Any]) -> dict[str, Any]:
    """learner.json, checked against how this learner was built (`expected` keys must match)."""
    path = Path(directory) / "learner.json"
    if not path.is_file():
        raise FileNotFoundError(f"{directory} is not a learner checkpoint (no learner.json)")
    meta = json.loads(path.read_text())
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path}: checkpoint format {meta.get('format_version')}, this learner "
                         f"reads format {FORMAT_VERSION}")
    wrong = {k: (meta.get(k), v) for k, v in expected.items() if meta.get(k) != v}
    if wrong:
        raise ValueError(f"{path} was written by a differently built learner; (checkpoint, "
                         f"this learner) = {wrong}: build the Learner with the checkpoint's "
                         "settings")
    return meta
