"""The learner on the real tiny model, plain torch engine (DeepSpeed: test_deepspeed.py)."""

import dataclasses

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from spade_ray.learner import CompletionGroup, Learner, LearnerParams
from spade_ray.records import Role
from tests.learner.conftest import FAST

STEPS = 4


def dpo_run(tiny_model, pairs, steps=STEPS, **overrides):
    learner = Learner(tiny_model, LearnerParams(**{**FAST, **overrides}))
    return learner, [learner.dpo_update(pairs) for _ in range(steps)]


@pytest.mark.parametrize("lora_rank, bf16", [(4, False), (0, False), (4, True)],
                         ids=["lora", "full", "lora-bf16"])
def test_dpo_steps_raise_the_margin_and_lower_the_loss(tiny_model, pairs, lora_rank, bf16):
    _, history = dpo_run(tiny_model, pairs, lora_rank=lora_rank, bf16=bf16)
    # Each step reports the loss before its update; step 1 starts at policy == reference.
    assert history[0]["loss"] == pytest.approx(0.6931, abs=1e-4)
    assert history[-1]["loss"] < history[0]["loss"] - 0.05
    assert history[-1]["logratio_margin"] > history[0]["logratio_margin"] + 0.5


def test_activation_checkpointing_changes_memory_not_the_arithmetic(tiny_model, pairs):
    plain, plain_history = dpo_run(tiny_model, pairs, steps=2)
    recomputed, history = dpo_run(tiny_model, pairs, steps=2, activation_checkpointing=True)
    assert recomputed.engine.module.is_activation_checkpointing
    assert [h["loss"] for h in history] == pytest.approx([h["loss"] for h in plain_history],
                                                         abs=1e-6)
    for (name, a), b in zip(plain.engine.module.named_parameters(),
                            recomputed.engine.module.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=name)


def test_updates_wait_for_min_pairs_and_keep_the_remainder(tiny_model, pairs):
    learner = Learner(tiny_model, LearnerParams(**{**FAST, "min_pairs_per_update": 6}))
    assert learner.dpo_update(pairs[:3]) is None
    assert learner.dpo_update(pairs[:2]) is None and learner.step == 0
    stats = learner.dpo_update(pairs[:3])  # 8 buffered: two steps of 4 pairs
    assert (stats["steps"], stats["items"], stats["buffered"], learner.step) == (2, 8, 0, 2)
    assert learner.dpo_update(pairs[:3]) is None and learner.buffered == 3


def test_items_older_than_min_version_are_dropped_new_and_buffered_alike(tiny_model, pairs):
    learner = Learner(tiny_model, LearnerParams(**{**FAST, "min_pairs_per_update": 4}))
    written_by = [dataclasses.replace(p, solver_version=v) for p, v in zip(pairs, (1, 1, 2, 2))]
    assert learner.dpo_update(written_by[:2]) is None and learner.buffered == 2  # v1, kept
    # the weights moved on to v3: with a bound of 1 the buffered v1 pairs and a new one go
    assert learner.update([*written_by[2:], dataclasses.replace(pairs[0], solver_version=1)],
                          min_version=2) is None
    assert learner.buffered == 2
    stats = learner.update([dataclasses.replace(p, solver_version=3) for p in pairs[:2]],
                           min_version=2)
    assert (stats["items"], stats["stale"]) == (4, 3)  # counted once they are reported
    assert learner.update([], min_version=2) is None and learner.buffered == 0


def test_a_generator_pair_is_dated_by_the_generator_and_a_group_by_its_weights(tiny_model,
                                                                              pairs):
    learner = Learner(tiny_model, LearnerParams(**{**FAST, "min_pairs_per_update": 8}))
    generator = dataclasses.replace(pairs[0], role=Role.GENERATOR, solver_version=0,
                                    generator_version=5)
    learner.update([generator, dataclasses.replace(generator, generator_version=4)],
                   min_version=5)
    assert learner.buffered == 1
    groups = Learner(tiny_model, LearnerParams(**{**FAST, "algorithm": "grpo"}))
    group = CompletionGroup("p", ("a", "b"), (1.0, 0.0), "t", weights_version=4)
    groups.update([group, dataclasses.replace(group, weights_version=None)], min_version=5)
    assert groups.buffered == 1  # a group of unknown version is never stale


def test_merged_weights_load_into_the_base_architecture_and_change_its_output(tiny_model,
                                                                               pairs):
    learner, _ = dpo_run(tiny_model, pairs, steps=6, lr=3e-2)
    adapters = {k: v.clone() for k, v in learner.engine.module.state_dict().items()
                if "lora_" in k}
    state = learner.policy_state_dict()
    assert all(torch.equal(v, learner.engine.module.state_dict()[k])
               for k, v in adapters.items())  # merging left the training adapters alone
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    tuned = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    tuned.load_state_dict(state, strict=True)
    ids = tokenizer(pairs[0].prompt[:-len("def add0(x):\n")], return_tensors="pt")["input_ids"]
    generate = dict(max_new_tokens=24, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        assert not torch.equal(tuned.generate(ids, **generate), base.generate(ids, **generate))
        assert torch.allclose(tuned(ids).logits, learner.engine.module(input_ids=ids).logits,
                              atol=1e-4)  # the merge is the policy, not an approximation


def test_a_merged_checkpoint_is_a_loadable_model_directory(tiny_model, pairs, tmp_path):
    learner, _ = dpo_run(tiny_model, pairs, steps=1)
    learner.save_checkpoint(tmp_path / "ckpt", merged=True)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt" / "merged",
                                                  dtype=torch.float32).state_dict()
    expected = learner.policy_state_dict()
    assert loaded.keys() == expected.keys()
    assert all(torch.equal(loaded[k], expected[k]) for k in expected)


def test_resume_gives_the_same_next_step_loss(tiny_model, pairs, tmp_path):
    # Uninterrupted: three updates. Interrupted: two, a checkpoint, a fresh learner, one more.
    # A pair left in the buffer must survive the checkpoint too.
    _, straight = dpo_run(tiny_model, pairs + pairs[:1], steps=3, warmup_steps=3)
    first, _ = dpo_run(tiny_model, pairs + pairs[:1], steps=2, warmup_steps=3)
    first.save_checkpoint(tmp_path / "ckpt")
    resumed = Learner(tiny_model, LearnerParams(**{**FAST, "warmup_steps": 3}))
    resumed.load_checkpoint(tmp_path / "ckpt")
    assert (resumed.step, resumed.buffered) == (2, 2)
    after = resumed.dpo_update(pairs + pairs[:1])
    assert after["step"] == straight[-1]["step"] == 3
    assert torch.allclose(torch.tensor(after["loss"]), torch.tensor(straight[-1]["loss"]))
    assert after["lr"] == straight[-1]["lr"]


def test_a_checkpoint_of_another_setup_is_refused(tiny_model, pairs, tmp_path):
    learner, _ = dpo_run(tiny_model, pairs, steps=1)
    learner.save_checkpoint(tmp_path / "ckpt")
    with pytest.raises(ValueError, match="lora_rank"):
        Learner(tiny_model, LearnerParams(**{**FAST, "lora_rank": 8})).load_checkpoint(
            tmp_path / "ckpt")


def test_several_ranks_without_deepspeed_are_refused(tiny_model, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="WORLD_SIZE=2: more than one learner rank needs "
                                         "deepspeed_config"):
        Learner(tiny_model, LearnerParams(**FAST))


def test_grpo_update_runs_and_moves_the_policy(tiny_model):
    groups = [CompletionGroup(f"Add {i} to x:\n", ("return x + 1", "return x", "pass"),
                              (1.0, 0.5, 0.0), f"t{i}") for i in range(4)]
    learner = Learner(tiny_model, LearnerParams(**{**FAST, "algorithm": "grpo"}))
    before = learner.policy_state_dict()
    stats = learner.grpo_update(groups)
    after = learner.policy_state_dict()
    assert stats["step"] == 1 and stats["ratio_mean"] == pytest.approx(1.0)
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_mean_token_logp_is_the_per_token_mean_over_all_texts(tiny_model, pairs):
    learner = Learner(tiny_model, LearnerParams(**FAST))
    texts = [(p.prompt, p.chosen) for p in pairs] + [("", "def f():\n    return 1\n")]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    total = tokens = 0.0
    with torch.no_grad():
        for context, completion in texts:  # the textbook sum, one text at a time
            prompt_ids = tokenizer(context)["input_ids"] or [tokenizer.bos_token_id or 0]
            completion_ids = tokenizer(completion, add_special_tokens=False)["input_ids"]
            ids = torch.tensor([prompt_ids + completion_ids])
            logps = base(ids).logits[0, :-1].log_softmax(-1)
            positions = range(len(prompt_ids) - 1, ids.shape[1] - 1)
            total += sum(float(logps[i, ids[0, i + 1]]) for i in positions)
            tokens += len(completion_ids)
    # At step 0 the LoRA policy is the base model.
    assert learner.mean_token_logp(texts) == pytest.approx(total / tokens, abs=1e-4)
    assert learner.mean_token_logp(texts, batch_size=1) == pytest.approx(total / tokens,
                                                                         abs=1e-4)
    for nothing in ([], [("def f():", "")]):
        with pytest.raises(ValueError, match="at least one"):
            learner.mean_token_logp(nothing)


def test_dpo_widens_the_chosen_over_rejected_mean_token_logp_gap(tiny_model, pairs):
    learner = Learner(tiny_model, LearnerParams(**FAST))
    chosen, rejected = ([(p.prompt, getattr(p, side)) for p in pairs]
                        for side in ("chosen", "rejected"))
    before = learner.mean_token_logp(chosen), learner.mean_token_logp(rejected)
    for _ in range(STEPS):
        learner.dpo_update(pairs)
    after = learner.mean_token_logp(chosen), learner.mean_token_logp(rejected)
    assert after[0] - after[1] > before[0] - before[1] + 0.1


def test_rpo_adds_the_chosen_nll_and_holds_the_chosen_likelihood_up(tiny_model, pairs):
    from spade_ray.tasks import split_program

    chosen = [split_program(p.prompt, p.chosen) for p in pairs]
    rpo, history = dpo_run(tiny_model, pairs, rpo_alpha=1.0)
    # step 0: policy == base
    nll = -Learner(tiny_model, LearnerParams(**FAST)).mean_token_logp(chosen)
    # equal-length chosen programs: the micro-batches' pooled NLLs average to the batch's
    assert history[0]["dpo_loss"] == pytest.approx(0.6931, abs=1e-4)
    assert history[0]["loss"] == pytest.approx(0.6931 + nll, abs=1e-3)
    plain, _ = dpo_run(tiny_model, pairs)
    assert rpo.mean_token_logp(chosen) > plain.mean_token_logp(chosen) + 0.05
    with pytest.raises(ValueError, match="rpo_alpha"):
        Learner(tiny_model, LearnerParams(**FAST, rpo_alpha=-1.0))


def test_the_learner_picks_the_dtype_the_rollout_engines_pick(tiny_model):
    from spade_ray.rollout.hf_backend import pick_dtype

    learner = Learner(tiny_model, LearnerParams(**{**FAST, "bf16": None}))
    assert learner.bf16 == (pick_dtype("auto") is torch.bfloat16)
