"""How the policy is optimised: plain torch, or a DeepSpeed engine (ZeRO 0-2), behind one seam.

Both engines do the same arithmetic from the same numbers: AdamW, a linear warm-up to `lr` over
`warmup_steps` optimizer steps (then constant), gradient clipping, and `grad_accum` micro-batches
per optimizer step with each micro-batch loss scaled by 1 / grad_accum. The DeepSpeed engine
reads everything else (ZeRO stage, bf16, optimizer type and its betas/eps, communication knobs)
from a JSON config such as conf/deepspeed/zero2.json; the learner owns the keys listed in
`LEARNER_KEYS` and writes them, so one number never lives in two places. The LR schedule is the
learner's too, handed to DeepSpeed as a client scheduler: DeepSpeed's WarmupLR sets the lr at
construction and again after each step, so its first two optimizer steps both run at
warmup_min_lr (measured: lrs 0, 0, lr/2, lr for 2 warm-up steps), two wasted updates in a
self-play round that may only have a few. A "scheduler" section in the JSON is refused.

DeepSpeed on CPU (DESIGN.md): gloo. A one-rank job's environment (MASTER_ADDR/PORT, RANK,
WORLD_SIZE, LOCAL_RANK) is filled in when absent; with more ranks LearnerGroup (actor.py) sets it
for each rank's actor, as a launcher would, and the ranks train data-parallel: DeepSpeed averages
the gradients, the learner splits each optimizer step's items across the ranks and averages the
reported figures (`Ranks`). DeepSpeed JIT-compiles C++ ops on first use; `torch_adam` in the
config keeps the optimizer in torch, and the CPU shared-memory all-reduce op serves only
DeepSpeed inference's all-reduce, which training never calls, so it is not built (measured here,
2 cores, a toy model: deepspeed.initialize took 201 s with those two builds on a fresh machine,
6.5 s with them cached, 3.3 s without them).
TORCH_EXTENSIONS_DIR caches any op a config does need under the spade-ray cache
($SPADE_CACHE, default ~/.cache/spade-ray).
Non-goals: ZeRO-3 and optimizer offload (parameters would need gathering for the merged state
dict).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_EXTENSIONS_DIR = (Path(os.environ.get("SPADE_CACHE", Path.home() / ".cache" / "spade-ray"))
                          / "torch_extensions")
LEARNER_KEYS = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                "train_batch_size", "gradient_clipping", "optimizer.params.lr",
                "optimizer.params.weight_decay", "bf16.enabled")


class Ranks:
    """This process's place in the learner's data-parallel group, and the few collectives the
    learner itself needs (DeepSpeed's process group; none with one rank)."""

    def __init__(self, rank: int = 0, world_size: int = 1,
                 device: torch.device = torch.device("cpu")) -> None:
        self.rank, self.world_size, self.device = rank, world_size, device

    def mean(self, values: list[float]) -> list[float]:
        """Each value averaged over the ranks."""
        if self.world_size == 1:
            return values
        # on the engine's device: NCCL reduces only CUDA tensors
        total = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(total)
        return (total / self.world_size).tolist()

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        if self.world_size == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()


def world_size_from_env() -> int:
    """WORLD_SIZE as a launcher (or LearnerGroup) set it; 1 when unset."""
    value = os.environ.get("WORLD_SIZE", "1")
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"WORLD_SIZE must be an integer >= 1, got {value!r}")
    return int(value)


class TrainEngine(Protocol):
    """The optimisation seam the learner uses; `module` is the (peft) model being trained."""

    module: nn.Module
    device: torch.device
    ranks: Ranks

    def forward(self, **inputs: Any) -> Any: ...
    def compute(self) -> contextlib.AbstractContextManager: ...
    def micro_step(self, loss: torch.Tensor, boundary: bool) -> float | None: ...
    def lr(self) -> float: ...
    def lr_scale(self, factor: float) -> contextlib.AbstractContextManager: ...
    def save(self, directory: Path) -> None: ...
    def load(self, directory: Path) -> None: ...


def warmup_factor(step: int, warmup_steps: int) -> float:
    """LR multiplier of optimizer step `step` (0-based): (step + 1) / W for the first W steps,
    then 1 (W = 0: no warm-up). Every step learns, unlike a warm-up that starts at 0."""
    if warmup_steps <= 0:
        return 1.0
    return min(1.0, (step + 1) / warmup_steps)


def warmup_scheduler(optimizer: torch.optim.Optimizer, warmup_steps: int
                     ) -> torch.optim.lr_scheduler.LambdaLR:
    # A lambda, not a callable object: LambdaLR leaves functions out of its state_dict.
    return torch.optim.lr_scheduler.LambdaLR(optimizer,
                                             lambda step: warmup_factor(step, warmup_steps))


@contextlib.contextmanager
def scaled_schedule(scheduler: torch.optim.lr_scheduler.LambdaLR, factor: float
                    ) -> Iterator[None]:
    """The schedule's learning rates times `factor` while inside (the SFT warm start trains at
    its own rate with the same optimizer, so one optimizer state carries on into the rounds);
    the schedule's own rates are back, for the step it is at, on the way out."""
    base = list(scheduler.base_lrs)

    def apply(rates: list[float]) -> None:
        scheduler.base_lrs = rates
        for group, rate, rule in zip(scheduler.optimizer.param_groups, rates,
                                     scheduler.lr_lambdas, strict=True):
            group["lr"] = rate * rule(scheduler.last_epoch)

    apply([rate * factor for rate in base])
    try:
        yield
    finally:
        apply(base)


class TorchEngine:
    """AdamW + warm-up in plain torch; bf16 by autocast over float32 master weights."""

    def __init__(self, model: nn.Module, params: list[nn.Parameter], lr: float,
                 weight_decay: float, warmup_steps: int, max_grad_norm: float,
                 grad_accum: int, bf16: bool) -> None:
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.module = model.to(self.device)
        self.ranks = Ranks()
        self.params = params
        self.grad_accum = grad_accum
        self.max_grad_norm = max_grad_norm
        self.bf16 = bf16
        self.optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay,
                                           betas=(0.9, 0.999), eps=1e-8)
        self.scheduler = warmup_scheduler(self.optimizer, warmup_steps)

    def forward(self, **inputs: Any) -> Any:
        return self.module(**inputs)

    def compute(self) -> contextlib.AbstractContextManager:
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16)

    def micro_step(self, loss: torch.Tensor, boundary: bool) -> float | None:
        (loss / self.grad_accum).backward()
        if not boundary:
            return None
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def lr_scale(self, factor: float) -> contextlib.AbstractContextManager:
        return scaled_schedule(self.scheduler, factor)

    def save(self, directory: Path) -> None:
        """Trainable weights exactly as trained (float32 masters) + optimizer + scheduler."""
        weights = {n: p.detach().cpu() for n, p in self.module.named_parameters()
                   if p.requires_grad}
        torch.save({"trainable": weights, "optimizer": self.optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict()}, directory / "optimizer.pt")

    def load(self, directory: Path) -> None:
        path = directory / "optimizer.pt"
        if not path.is_file():
            raise FileNotFoundError(f"no torch engine state at {path} (a DeepSpeed checkpoint "
                                    "needs deepspeed_config set)")
        state = torch.load(path, map_location=self.device, weights_only=True)
        expected = {n for n, p in self.module.named_parameters() if p.requires_grad}
        if set(state["trainable"]) != expected:
            raise ValueError(f"{path} holds trainable weights {len(state['trainable'])} that do "
                             f"not match this policy's {len(expected)}: was it built with "
                             "another model or lora_rank?")
        self.module.load_state_dict(state["trainable"], strict=False)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])


def deepspeed_config(path: str | Path, *, lr: float, weight_decay: float,
                     max_grad_norm: float, micro_batch_size: int, grad_accum: int,
                     bf16: bool) -> dict[str, Any]:
    """The JSON config at `path` with the learner's keys (LEARNER_KEYS) written in."""
    path = _config_path(path)
    config = json.loads(path.read_text())
    stage = config.get("zero_optimization", {}).get("stage", 0)
    if stage > 2:
        raise ValueError(f"{path}: ZeRO stage {stage} partitions the parameters; the learner "
                         "supports stages 0-2 (policy_state_dict reads whole parameters)")
    if "scheduler" in config:
        raise ValueError(f"{path} has a 'scheduler' section; the learner owns the LR schedule "
                         "(its warmup_steps, see engines.py): remove the section")
    config = copy.deepcopy(config)
    config.pop("train_batch_size", None)  # DeepSpeed derives it: micro * accum * world size
    config["train_micro_batch_size_per_gpu"] = micro_batch_size
    config["gradient_accumulation_steps"] = grad_accum
    config["gradient_clipping"] = max_grad_norm
    config.setdefault("optimizer", {"type": "AdamW", "params": {}})
    config["optimizer"].setdefault("params", {}).update(lr=lr, weight_decay=weight_decay)
    config["bf16"] = {**config.get("bf16", {}), "enabled": bf16}
    return config


def _config_path(path: str | Path) -> Path:
    """`path` as given, or relative to the repository (conf/deepspeed/... from a config file
    works in a Ray worker whose working directory is not the repository)."""
    given = Path(path).expanduser()
    candidates = [given] if given.is_absolute() else [given, REPO_ROOT / given]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"DeepSpeed config {path} not found (tried "
                            f"{', '.join(map(str, candidates))}); see conf/deepspeed/")


class DeepSpeedEngine:
    """A DeepSpeed engine on the policy's trainable parameters (ZeRO 0-2)."""

    def __init__(self, model: nn.Module, params: list[nn.Parameter], config: dict[str, Any],
                 warmup_steps: int, frozen_excluded: bool) -> None:
        _distributed_env()
        import deepspeed

        self.engine, _, _, _ = deepspeed.initialize(
            model=model, model_parameters=params, config=config,
            lr_scheduler=lambda optimizer: warmup_scheduler(optimizer, warmup_steps))
        self.ranks = Ranks(self.engine.global_rank, self.engine.world_size, self.engine.device)
        self.module = self.engine.module
        self.device = self.engine.device
        self.frozen_excluded = frozen_excluded

    def forward(self, **inputs: Any) -> Any:
        return self.engine(**inputs)

    def compute(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()  # the module itself is cast to bf16 when enabled

    def micro_step(self, loss: torch.Tensor, boundary: bool) -> float | None:
        self.engine.backward(loss)  # scales by 1 / gradient_accumulation_steps
        if boundary != self.engine.is_gradient_accumulation_boundary():
            raise RuntimeError("the learner's accumulation count disagrees with DeepSpeed's "
                               "gradient_accumulation_steps")
        self.engine.step()  # optimizer + scheduler only at the boundary
        if not boundary:
            return None
        norm = self.engine.get_global_grad_norm()
        return None if norm is None else float(norm)

    def lr(self) -> float:
        return float(self.engine.get_lr()[0])

    def lr_scale(self, factor: float) -> contextlib.AbstractContextManager:
        return scaled_schedule(self.engine.lr_scheduler, factor)  # our client scheduler

    def save(self, directory: Path) -> None:
        # LoRA: the frozen base is the model directory itself; only adapters + optimizer go here.
        self.engine.save_checkpoint(str(directory / "deepspeed"), tag="engine",
                                    save_latest=False,
                                    exclude_frozen_parameters=self.frozen_excluded)

    def load(self, directory: Path) -> None:
        path, _ = self.engine.load_checkpoint(str(directory / "deepspeed"), tag="engine",
                                              load_module_strict=not self.frozen_excluded)
        if path is None:
            raise FileNotFoundError(f"no DeepSpeed engine state under {directory}/deepspeed")


def _distributed_env() -> None:
    """A one-rank job's environment, unless a launcher set it; see the module docstring."""
    defaults = {"MASTER_ADDR": "127.0.0.1", "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                "LOCAL_SIZE": "1", "TORCH_EXTENSIONS_DIR": str(DEFAULT_EXTENSIONS_DIR)}
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = str(free_port())
    import deepspeed.ops

    # deepspeed/comm/torch.py builds the CPU shared-memory all-reduce op when the op is marked
    # compatible, for inference_all_reduce only (the op's compatibility dict is documented as
    # one cached, editable dict).
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def free_port() -> int:
    """A port free on every interface: rank 0's rendezvous listens there for the other nodes."""
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])
