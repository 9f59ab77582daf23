"""PPO's critic: a value per completion token, from a value head on the policy's trunk or from a
critic of its own, a second LoRA adapter on the policy's frozen base with its own value head.

Two kinds (records.Critic), chosen by `LearnerParams.critic`:
* "lora" (the default): the critic is the same base model with an adapter of its own ("critic",
  the policy adapter's rank and targets) and a value head. One copy of the base weights serves
  the policy, the critic and the reference (the issue's "LoRA on the same base by default on
  CPU": a separate critic model, as OpenRLHF and veRL run it on GPUs, would double the base's
  memory and its load time on a 2-core, 24 GiB machine), while the value loss trains only the
  critic's adapter and head: it never pulls the policy's weights toward predicting returns.
  Cost: a second forward and backward through the base per micro-batch, roughly twice a GRPO
  step. Needs a LoRA policy and no activation checkpointing (records.LearnerParams says why).
* "head": a linear value head on the policy's last hidden state. One forward gives the log-probs
  and the values, the cheapest critic; the value loss (weighted by vf_coef) also trains the
  policy's adapters, the shared-trunk trade-off. Works with full fine-tuning.

The head reads the last hidden state at the position that predicts a completion token, so V_t is
the value of the prefix before token t and values line up with token_logps' columns. It starts
at zero (every first value 0: the first advantages are the plain returns), and it computes in
float32 whatever the model's dtype, as the log-probs do. Where the parameters live: the head is
the trained module's `value_head` and the adapter peft's "critic", so the engine's optimizer
steps them with the policy's, both engines' checkpoints hold them (the torch engine's trainable
weights, DeepSpeed's module state), and weights.merged_state_dict leaves them out.
Non-goals: a critic with a base model of its own; a critic initialised from a reward model.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from spade_ray.learner.logprobs import CausalLM, ScoredHidden, TokenBatch, scored_hidden
from spade_ray.learner.weights import VALUE_HEAD, is_lora, keep_trainable
from spade_ray.records import Critic

CRITIC_ADAPTER = "critic"


def add_critic(model: nn.Module, kind: Critic) -> None:
    """Give the policy `model` a critic of `kind` (before the engine collects the trainable
    parameters: they are trained together)."""
    if kind is Critic.LORA:
        _add_critic_adapter(model)
    hidden = model.config.get_text_config().hidden_size
    head = nn.Linear(hidden, 1)
    nn.init.zeros_(head.weight)
    nn.init.zeros_(head.bias)
    model.add_module(VALUE_HEAD, head)


def _add_critic_adapter(model: nn.Module) -> None:
    if not is_lora(model):
        raise ValueError("critic='lora' adds an adapter to a LoRA policy; this policy is fully "
                         "fine-tuned (lora_rank=0): use critic='head'")
    model.add_adapter(CRITIC_ADAPTER, copy.deepcopy(model.peft_config["default"]))
    # add_adapter leaves only the active (policy) adapter trainable
    for name, param in model.named_parameters():
        if f".{CRITIC_ADAPTER}." in name:
            param.requires_grad_(True)


@contextlib.contextmanager
def critic_adapter(model: nn.Module) -> Iterator[None]:
    """The critic's adapter active in place of the policy's, every trainable parameter still
    trainable afterwards (weights.keep_trainable)."""
    active = model.active_adapter
    with keep_trainable(model):
        model.set_adapter(CRITIC_ADAPTER)
        try:
            yield
        finally:
            model.set_adapter(active)


def policy_and_values(model: CausalLM, batch: TokenBatch, kind: Critic
                      ) -> tuple[Tensor, Tensor, Tensor]:
    """(log-probs, values, mask), each [B, T] over the completion tokens (token_logps'
    layout): one forward for critic 'head', the policy's and the critic adapter's for 'lora'."""
    policy = scored_hidden(model, batch)
    logps, mask = policy.rows(policy.logps())
    if kind is Critic.HEAD:
        critic = policy
    else:
        with critic_adapter(model.module):
            critic = scored_hidden(model, batch)
    values, _ = critic.rows(_values(model.module, critic))
    return logps, values, mask


def _values(module: nn.Module, scored: ScoredHidden) -> Tensor:
    """[N] float32 values of the scored positions (autocast off: it would run the head in bf16)."""
    head = getattr(module, VALUE_HEAD, None)
    if head is None:
        raise ValueError(f"{type(module).__name__} has no {VALUE_HEAD}: build the learner with "
                         "algorithm='ppo' (add_critic)")
    with torch.autocast(scored.hidden.device.type, enabled=False):
        return F.linear(scored.hidden.float(), head.weight.float(),
                        head.bias.float()).squeeze(-1)
