"""Data-parallel learner ranks: a LearnerGroup of two DeepSpeed ranks (gloo, a local Ray cluster)
against one plain torch rank with the same global batch."""

from pathlib import Path

import pytest
import ray
from ray.util.placement_group import placement_group

from spade_ray.learner import Learner, LearnerParams
from spade_ray.learner.actor import LearnerGroup
from tests.learner.conftest import FAST

pytest.importorskip("deepspeed", reason="the deepspeed extra is not installed")

CONFIG = str(Path(__file__).resolve().parents[2] / "conf" / "deepspeed" / "zero2.json")
# Per rank one micro-batch of 2 pairs: 2 ranks step on 4 pairs, as FAST's 2 x 2 on one rank.
PER_RANK = {**FAST, "grad_accum": 1, "deepspeed_config": CONFIG}


@pytest.fixture(scope="module")
def group(tiny_model):
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        bundles = placement_group([{"CPU": 1}] * 2)
        ray.get(bundles.ready())
        yield LearnerGroup.start(bundles, [0, 1], 1, 0, tiny_model,
                                 LearnerParams(**PER_RANK))
    finally:
        ray.shutdown()


def test_two_ranks_step_as_one_rank_with_the_same_global_batch(group, tiny_model, pairs):
    single = Learner(tiny_model, LearnerParams(**FAST))
    for step in range(1, 4):
        ours, theirs = group.update(pairs), single.dpo_update(pairs)
        assert ours["step"] == theirs["step"] == step and ours["items"] == theirs["items"] == 4
        for key in ("loss", "logratio_margin", "rewards_accuracy", "grad_norm"):
            assert ours[key] == pytest.approx(theirs[key], abs=1e-5), key
    assert group.step() == 3
    merged, expected = ray.get(group.policy_state_dict()), single.policy_state_dict()
    assert merged.keys() == expected.keys()
    assert max((merged[k] - expected[k]).abs().max().item() for k in merged) < 1e-4
    logp = ray.get(group.mean_token_logp([(pairs[0].prompt, pairs[0].chosen)]))
    assert logp == pytest.approx(single.mean_token_logp([(pairs[0].prompt, pairs[0].chosen)]),
                                 abs=1e-4)


def test_a_two_rank_checkpoint_holds_every_rank_and_resumes_exactly(group, tiny_model, pairs,
                                                                   tmp_path):
    directory = tmp_path / "ckpt"
    assert group.save_checkpoint(str(directory)) == str(directory)
    assert (directory / "rng.pt").is_file() and (directory / "rng.rank1.pt").is_file()
    partitions = sorted(p.name for p in (directory / "deepspeed" / "engine").glob("*optim*"))
    assert len(partitions) == 2, partitions  # ZeRO-2: each rank's optimizer shard
    step = group.step()
    after = group.update(pairs)
    assert group.load_checkpoint(str(directory)) == step
    again = group.update(pairs)
    assert again["step"] == after["step"] == step + 1
    assert again["loss"] == pytest.approx(after["loss"], abs=1e-6)
    with pytest.raises(ValueError, match="written by 2 learner ranks, this learner has 1"):
        Learner(tiny_model, LearnerParams(**{**FAST, "deepspeed_config": CONFIG})
                ).load_checkpoint(directory)
