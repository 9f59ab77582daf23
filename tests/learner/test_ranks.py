"""Data-parallel learner ranks: a LearnerGroup of two DeepSpeed ranks (gloo, a local Ray cluster)
against one plain torch rank with the same global batch."""

import pytest
import ray

from spade_ray.learner import Learner, LearnerParams
from tests.learner.conftest import FAST, ZERO2, two_ranks

pytest.importorskip("deepspeed", reason="the deepspeed extra is not installed")
pytestmark = pytest.mark.slow  # two DeepSpeed ranks on Ray: ~45 s for the module

# Per rank one micro-batch of 2 pairs: 2 ranks step on 4 pairs, as FAST's 2 x 2 on one rank.
PER_RANK = {**FAST, "grad_accum": 1, "deepspeed_config": ZERO2}


@pytest.fixture(scope="module")
def started(tiny_model, tmp_path_factory):
    """Two ranks and their checkpoint at step 0 (every test starts from it)."""
    with two_ranks(tiny_model, PER_RANK) as group:
        yield group, group.save_checkpoint(str(tmp_path_factory.mktemp("base") / "step_0"))


@pytest.fixture
def group(started):
    group, base = started
    group.load_checkpoint(base)
    return group


@pytest.fixture
def trained(group, tiny_model, pairs):
    """Three steps of the two ranks and of one plain torch rank with the same global batch."""
    single = Learner(tiny_model, LearnerParams(**FAST))
    history = [(group.update(pairs), single.dpo_update(pairs)) for _ in range(3)]
    return group, single, history


def test_two_ranks_take_the_steps_one_rank_takes(trained):
    group, _, history = trained
    assert [(ours["step"], ours["items"]) for ours, _ in history] == \
        [(theirs["step"], theirs["items"]) for _, theirs in history] == [(1, 4), (2, 4), (3, 4)]


@pytest.mark.parametrize("key", ["loss", "logratio_margin", "rewards_accuracy", "grad_norm"])
def test_two_ranks_report_what_one_rank_with_the_same_batch_reports(trained, key):
    _, _, history = trained
    assert [ours[key] for ours, _ in history] == pytest.approx(
        [theirs[key] for _, theirs in history], abs=1e-5)


def test_two_ranks_end_with_the_weights_of_one_rank(trained):
    group, single, _ = trained
    merged, expected = ray.get(group.policy_state_dict()), single.policy_state_dict()
    assert merged.keys() == expected.keys()
    assert max((merged[k] - expected[k]).abs().max().item() for k in merged) < 1e-4


def test_two_ranks_score_held_out_text_as_one_rank_does(trained, pairs):
    group, single, _ = trained
    text = [(pairs[0].prompt, pairs[0].chosen)]
    assert ray.get(group.mean_token_logp(text)) == pytest.approx(single.mean_token_logp(text),
                                                                 abs=1e-4)


def test_a_two_rank_checkpoint_holds_every_ranks_part(group, tmp_path):
    directory = tmp_path / "ckpt"
    assert group.save_checkpoint(str(directory)) == str(directory)
    partitions = sorted(p.name for p in (directory / "deepspeed" / "engine").glob("*optim*"))
    assert ((directory / "rng.pt").is_file(), (directory / "rng.rank1.pt").is_file(),
            len(partitions)) == (True, True, 2)  # ZeRO-2: each rank's optimizer shard


def test_a_two_rank_checkpoint_resumes_exactly(group, pairs, tmp_path):
    group.update(pairs)
    directory = str(tmp_path / "ckpt")
    group.save_checkpoint(directory)
    after = group.update(pairs)
    group.load_checkpoint(directory)
    again = group.update(pairs)
    assert (again["step"], again["loss"]) == (after["step"], pytest.approx(after["loss"],
                                                                          abs=1e-6))


def test_one_rank_refuses_a_two_rank_checkpoint(group, tiny_model, tmp_path):
    group.save_checkpoint(str(tmp_path / "ckpt"))
    with pytest.raises(ValueError, match="written by 2 learner ranks, this learner has 1"):
        Learner(tiny_model, LearnerParams(**{**FAST, "deepspeed_config": ZERO2})
                ).load_checkpoint(tmp_path / "ckpt")
