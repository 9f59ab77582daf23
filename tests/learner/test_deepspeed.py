"""The DeepSpeed engine (ZeRO-2, gloo, one CPU process) against the plain torch engine, DPO and
PPO."""


import pytest
import torch

from spade_ray.learner import Learner, LearnerParams
from tests.learner.conftest import FAST, ZERO2
from tests.learner.conftest import TOY_GROUPS as GROUPS

pytest.importorskip("deepspeed", reason="the deepspeed extra is not installed")

STEPS = 3


def run(tiny_model, pairs, steps, **overrides):
    learner = Learner(tiny_model,
                      LearnerParams(**{**FAST, "deepspeed_config": ZERO2, **overrides}))
    return learner, [learner.dpo_update(pairs) for _ in range(steps)]


@pytest.fixture(scope="module")
def deepspeed_history(tiny_model, pairs):
    return run(tiny_model, pairs, STEPS, warmup_steps=2)[1]


def test_deepspeed_dpo_steps_raise_the_margin_and_lower_the_loss(deepspeed_history):
    # the learner's warm-up over 2 steps (not DeepSpeed's WarmupLR, which starts with two 0s)
    assert [h["lr"] for h in deepspeed_history] == [0.005, 0.01, 0.01]
    assert deepspeed_history[-1]["loss"] < deepspeed_history[0]["loss"] - 0.01
    assert (deepspeed_history[-1]["logratio_margin"]
            > deepspeed_history[0]["logratio_margin"] + 0.1)


def test_deepspeed_and_torch_engines_do_the_same_arithmetic(tiny_model, pairs,
                                                            deepspeed_history):
    plain = Learner(tiny_model, LearnerParams(**{**FAST, "warmup_steps": 2}))
    history = [plain.dpo_update(pairs) for _ in range(STEPS)]
    for ours, theirs in zip(history, deepspeed_history):
        assert ours["lr"] == theirs["lr"]
        assert ours["loss"] == pytest.approx(theirs["loss"], abs=1e-5)


def test_deepspeed_resume_gives_the_same_next_step_loss(tiny_model, pairs, tmp_path,
                                                        deepspeed_history):
    first, _ = run(tiny_model, pairs, STEPS - 1, warmup_steps=2)
    first.save_checkpoint(tmp_path / "ckpt")
    resumed = Learner(tiny_model, LearnerParams(**{**FAST, "deepspeed_config": ZERO2,
                                                   "warmup_steps": 2}))
    resumed.load_checkpoint(tmp_path / "ckpt")
    after = resumed.dpo_update(pairs)
    assert after["step"] == STEPS and after["lr"] == deepspeed_history[-1]["lr"]
    assert torch.allclose(torch.tensor(after["loss"]),
                          torch.tensor(deepspeed_history[-1]["loss"]))


def test_deepspeed_bf16_trains(tiny_model, pairs):
    _, history = run(tiny_model, pairs, STEPS, bf16=True)
    assert history[-1]["loss"] < history[0]["loss"] - 0.01


def ppo_run(tiny_model, updates, **overrides):
    learner = Learner(tiny_model, LearnerParams(**{**FAST, "algorithm": "ppo",
                                                   "warmup_steps": 2, **overrides}))
    return learner, [learner.ppo_update(GROUPS) for _ in range(updates)]


@pytest.fixture(scope="module")
def deepspeed_ppo_history(tiny_model):
    return ppo_run(tiny_model, 2, deepspeed_config=ZERO2)[1]


def test_deepspeed_and_torch_engines_do_the_same_ppo_arithmetic(tiny_model,
                                                                deepspeed_ppo_history):
    _, history = ppo_run(tiny_model, 2)
    for ours, theirs in zip(history, deepspeed_ppo_history):
        assert ours["lr"] == theirs["lr"]
        for key in ("loss", "policy_loss", "value_loss"):
            assert ours[key] == pytest.approx(theirs[key], abs=1e-5), key


def test_deepspeed_ppo_resume_gives_the_same_next_update(tiny_model, tmp_path,
                                                         deepspeed_ppo_history):
    first, _ = ppo_run(tiny_model, 1, deepspeed_config=ZERO2)
    first.save_checkpoint(tmp_path / "ckpt")
    resumed = Learner(tiny_model, LearnerParams(**{**FAST, "algorithm": "ppo",
                                                   "warmup_steps": 2,
                                                   "deepspeed_config": ZERO2}))
    resumed.load_checkpoint(tmp_path / "ckpt")
    after = resumed.ppo_update(GROUPS)
    expected = deepspeed_ppo_history[-1]
    assert (after["step"], after["lr"]) == (expected["step"], expected["lr"])
    for key in ("loss", "value_loss"):  # value_loss: the critic came back too
        assert after[key] == pytest.approx(expected[key], abs=1e-6), key
