"""The policy and its frozen reference, and the policy's weights as an inference engine loads them.

LoRA (peft): the reference is the same model with its adapters disabled, so there is one copy of
the base weights; full fine-tuning keeps a frozen deep copy. `merged_state_dict` computes
W + (B A) * scaling functionally for every LoRA layer and returns the plain Hugging Face names
(what `load_state_dict` on a fresh model of the base architecture, the hf backend's
`update_weights` or a vLLM reload expects) without merging into, or otherwise touching, the
adapters being trained (peft's `merge_and_unload` would consume them), and without PPO's
critic (its adapter and the module's `value_head`, learner/critic.py).
Non-goals: ZeRO-3 (partitioned parameters would need gathering first), quantised base weights.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

VALUE_HEAD = "value_head"  # the trained module's attribute PPO's value head lives under


def load_policy(model_path: str, lora_rank: int, lora_alpha: int | None, seed: int,
                bf16: bool, activation_checkpointing: bool = False
                ) -> tuple[nn.Module, nn.Module | None]:
    """(policy, frozen reference copy or None for LoRA) on CPU. Trained weights are float32
    (master weights; the engine decides the compute dtype). LoRA's frozen base is bf16 when
    `bf16`: it needs no master copy, and autocast would otherwise re-cast all of it on every
    forward (measured: aten::copy_ 20% of a Gemma 3 270M step); peft keeps adapters float32.
    `activation_checkpointing` recomputes each decoder layer's activations in backward instead
    of keeping them (transformers' own, non-reentrant): less memory, a slower step (figures in
    bench/learner_step.py's output)."""
    from transformers import AutoModelForCausalLM

    if lora_rank < 0:
        raise ValueError(f"lora_rank must be >= 0 (0 = full fine-tuning), got {lora_rank}")
    torch.manual_seed(seed)  # LoRA's A matrices are random (Kaiming); B starts at 0
    dtype = torch.bfloat16 if bf16 and lora_rank > 0 else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
    _disable_dropout(model)
    _contiguous_head_input(model)
    model.train()  # from_pretrained returns eval mode, where activation checkpointing is off
    if activation_checkpointing:
        model.activation_checkpointing_enable({"use_reentrant": False})
    if lora_rank == 0:
        reference = copy.deepcopy(model)
        reference.requires_grad_(False)
        reference.eval()
        return model, reference
    from peft import LoraConfig, get_peft_model

    # alpha = 2r is the common choice (Raschka's LoRA experiments; TRL examples); all-linear
    # adapts every linear layer but the output head (peft's documented preset).
    config = LoraConfig(r=lora_rank, lora_alpha=lora_alpha or 2 * lora_rank,
                        target_modules="all-linear", lora_dropout=0.0, bias="none",
                        task_type="CAUSAL_LM")
    return get_peft_model(model, config), None


def _disable_dropout(model: nn.Module) -> None:
    """Dropout off everywhere (TRL's disable_dropout default for DPO): the policy and reference
    log-probs of one pair must come from the same function, and resumed runs must be exact."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    for name in ("attention_dropout", "hidden_dropout", "dropout"):
        if hasattr(model.config, name):
            setattr(model.config, name, 0.0)


def _contiguous_head_input(model: nn.Module) -> None:
    """Make the output head's input contiguous. With `logits_to_keep`, HF models slice the
    hidden states ([:, -k:, :], a strided view); torch's matmul folds a 3-D input into one mm
    only when it can view it as 2-D, so a strided one goes to bmm with the [vocab, hidden]
    weight expanded and copied per sequence. Measured for Gemma 3's 262k x 640 head, 4 x 129
    positions, one core: bf16 11.7 s strided vs 0.61 s contiguous (fp32 3.6 s vs 2.8 s)."""
    head = model.get_output_embeddings()
    if head is not None:
        head.register_forward_pre_hook(lambda _module, args: tuple(
            a.contiguous() if isinstance(a, torch.Tensor) else a for a in args))


def is_lora(model: nn.Module) -> bool:
    return hasattr(model, "peft_config")


@contextlib.contextmanager
def reference_mode(policy: nn.Module, reference: nn.Module | None) -> Iterator[nn.Module]:
    """The reference model for a no-grad forward: adapters disabled (LoRA) or the frozen copy."""
    with torch.no_grad():
        if reference is not None:
            yield reference
        elif is_lora(policy):
            with keep_trainable(policy), policy.disable_adapter():
                yield policy
        else:
            raise ValueError("full fine-tuning needs a frozen reference copy; none was built")


@contextlib.contextmanager
def keep_trainable(model: nn.Module) -> Iterator[None]:
    """Whatever is trainable on entry is trainable again on exit. peft's adapter switches
    (disable_adapter, set_adapter) leave only the active adapter trainable, which would freeze a
    second adapter (PPO's critic) that the engine's optimizer still steps."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    try:
        yield
    finally:
        for p in trainable:
            p.requires_grad_(True)


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the policy has no trainable parameters")
    return params


@torch.no_grad()
def merged_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The policy's weights under plain HF names, LoRA deltas folded in, as fresh CPU tensors.

    Tied weights (Gemma's lm_head = embed_tokens) stay one tensor under both names."""
    if not is_lora(model):
        return _detached({k: v for k, v in model.state_dict().items()
                          if not k.startswith(f"{VALUE_HEAD}.")})
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    merged: dict[str, torch.Tensor] = {}
    for name, module in base.named_modules():
        if isinstance(module, LoraLayer):
            weight = module.get_base_layer().weight
            delta = torch.zeros_like(weight, dtype=torch.float32)
            for adapter in module.active_adapters:
                delta += module.get_delta_weight(adapter).float()
            merged[f"{name}.weight"] = (weight.float() + delta).to(weight.dtype)
    out: dict[str, torch.Tensor] = {}
    clones: dict[tuple, torch.Tensor] = {}
    for key, value in base.state_dict(keep_vars=True).items():
        if ".lora_" in key:
            continue
        plain = key.replace(".base_layer.", ".")
        if plain in merged:
            out[plain] = merged[plain]
        else:
            out[plain] = _clone_once(value, clones)
    return out


def _detached(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    clones: dict[tuple, torch.Tensor] = {}
    return {k: _clone_once(v, clones) for k, v in state.items()}


def _clone_once(value: torch.Tensor, clones: dict[tuple, torch.Tensor]) -> torch.Tensor:
    """Clone each storage once, so shared (tied) tensors stay shared in the copy."""
    key = (value.data_ptr(), tuple(value.shape), value.dtype)
    if key not in clones:
        clones[key] = value.detach().to("cpu", copy=True)
    return clones[key]
