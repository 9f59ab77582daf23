"""PPO on two data-parallel DeepSpeed ranks (gloo, a local Ray cluster) against one plain torch
rank with the same global batch: the advantages are whitened over both ranks' tokens, so the two
ranks must train as the one does."""

import pytest
import ray

from spade_ray.learner import CompletionGroup, Learner, LearnerParams
from tests.learner.conftest import FAST, TOY_PROMPT, ZERO2, two_ranks

pytest.importorskip("deepspeed", reason="the deepspeed extra is not installed")
pytestmark = pytest.mark.slow  # two DeepSpeed ranks on Ray

ONE_RANK = {**FAST, "algorithm": "ppo"}
# Per rank one micro-batch of 2 groups: 2 ranks step on 4 groups, as FAST's 2 x 2 on one rank.
PER_RANK = {**ONE_RANK, "grad_accum": 1, "deepspeed_config": ZERO2}
# Rank 0 trains on the even groups, rank 1 on the odd ones: different rewards, so whitening over
# one rank's tokens alone would give other advantages than over both.
GROUPS = [CompletionGroup(TOY_PROMPT, ("aQb", "acb", "adb"),
                          (1.0, 0.0, 0.0) if i % 2 == 0 else (0.5, 0.5, 0.2), f"t{i}")
          for i in range(4)]


@pytest.fixture(scope="module")
def trained(tiny_model, tmp_path_factory):
    """Two ranks and one torch rank, 3 updates each; the ranks' checkpoint after the first."""
    with two_ranks(tiny_model, PER_RANK) as group:
        single = Learner(tiny_model, LearnerParams(**ONE_RANK))
        history = [(group.update(GROUPS), single.ppo_update(GROUPS))]
        checkpoint = group.save_checkpoint(str(tmp_path_factory.mktemp("ranks") / "step_1"))
        history += [(group.update(GROUPS), single.ppo_update(GROUPS)) for _ in range(2)]
        yield group, single, history, checkpoint


@pytest.mark.parametrize("key", ["loss", "policy_loss", "value_loss", "kl", "grad_norm"])
def test_two_ppo_ranks_report_what_one_rank_with_the_same_batch_reports(trained, key):
    _, _, history, _ = trained
    assert [ours["step"] for ours, _ in history] == [theirs["step"] for _, theirs in history]
    assert [ours[key] for ours, _ in history] == pytest.approx(
        [theirs[key] for _, theirs in history], abs=1e-5)


def test_two_ppo_ranks_end_with_the_weights_of_one_rank(trained):
    group, single, _, _ = trained
    merged, expected = ray.get(group.policy_state_dict()), single.policy_state_dict()
    assert max((merged[k] - expected[k]).abs().max().item() for k in merged) < 1e-4


def test_a_two_rank_ppo_checkpoint_resumes_exactly(trained):
    group, _, history, checkpoint = trained
    group.load_checkpoint(checkpoint)
    again = group.update(GROUPS)
    expected = history[1][0]
    assert again["step"] == expected["step"]
    for key in ("loss", "value_loss"):
        assert again[key] == pytest.approx(expected[key], abs=1e-6), key
