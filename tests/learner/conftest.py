"""Fixed preference pairs shaped like the solver's (prompt ends with the signature; programs
start with it), PPO's toy-reward groups, and the fast settings of small learners on the tiny
model."""

import contextlib
from pathlib import Path

import pytest
import ray
import torch
from ray.util.placement_group import placement_group

from spade_ray.learner.actor import LearnerGroup
from spade_ray.records import CompletionGroup, LearnerParams, PreferencePair


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny-model matmuls gain nothing from a second thread, and OpenMP's spinning threads
    slow down 10-30x when the 2 cores are shared with other work (measured: 0.05 s vs 0.25-1.4 s
    per DPO step under a load of 2.8)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_pair(i: int) -> PreferencePair:
    signature = f"def add{i}(x):"
    prompt = f"### Task\nReturn x plus {i}.\n### Solution\n{signature}\n"
    return PreferencePair(
        task_id=f"t{i}", prompt=prompt, chosen=f"{signature}\n    return x + {i}\n",
        rejected=f"{signature}\n    return None\n", chosen_candidate_id=f"t{i}/0",
        rejected_candidate_id=f"t{i}/1", chosen_score=1.0, rejected_score=0.0,
        solver_version=0, generator_version=0)


@pytest.fixture(scope="session")
def pairs() -> list[PreferencePair]:
    return [make_pair(i) for i in range(4)]


# Fast, deterministic settings: float32 (no autocast), a learning rate a random tiny model
# visibly moves with, 4 pairs per optimizer step in 2 micro-batches.
FAST = dict(lr=1e-2, bf16=False, min_pairs_per_update=4, micro_batch_size=2, grad_accum=2,
            lora_rank=4, seed=0)

# PPO's toy reward: 1 for the completion with the target token Q, 0 for the others.
TOY_PROMPT = "Pick a letter: "
TOY_GROUPS = [CompletionGroup(TOY_PROMPT, ("aQb", "acb", "adb"), (1.0, 0.0, 0.0), f"t{i}")
              for i in range(4)]


ZERO2 = str(Path(__file__).resolve().parents[2] / "conf" / "deepspeed" / "zero2.json")


@contextlib.contextmanager
def two_ranks(model_path: str, params: dict):
    """Two DeepSpeed learner ranks (gloo) on a local 2-CPU Ray cluster, a bundle each."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        bundles = placement_group([{"CPU": 1}] * 2)
        ray.get(bundles.ready())
        yield LearnerGroup.start(bundles, [0, 1], 1, 0, model_path, LearnerParams(**params))
    finally:
        ray.shutdown()
