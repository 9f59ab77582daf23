"""`hf` backend: transformers `generate`, batched with left padding; the CPU default.

n completions per prompt come from `num_return_sequences`; prompts are batched so that at most
`max_batch_size` sequences decode together. Stop strings end a sequence early (transformers'
`stop_strings`) and are cut off exactly afterwards. Weights update in place with
`load_state_dict`, so the engine is never rebuilt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from spade_ray.records import Completion, SamplingParams
from spade_ray.rollout.backend import (
    ModelLoadError,
    PromptTooLong,
    check_version,
    cut_at_stop,
)
from spade_ray.rollout.dtypes import bf16_supported


def pick_dtype(name: str) -> torch.dtype:
    if name == "auto":  # bf16 where the CPU/GPU runs it natively, else fp32
        device = "cuda" if torch.cuda.is_available() else "cpu"
        return torch.bfloat16 if bf16_supported(device) else torch.float32
    try:
        return {"bfloat16": torch.bfloat16, "float16": torch.float16,
                "float32": torch.float32}[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}: use auto, bfloat16, float16 or float32") \
            from None


class HFBackend:
    name = "hf"

    def __init__(self, model_path: str, dtype: str = "auto", device: str = "cpu",
                 max_batch_size: int = 16, seed: int = 0) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
            self.model = AutoModelForCausalLM.from_pretrained(
                model_path, dtype=pick_dtype(dtype)).to(device).eval()
        except (OSError, ValueError) as e:
            raise ModelLoadError(f"cannot load model {model_path!r} with transformers: {e}") \
                from e
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.device = device
        self.max_batch_size = max_batch_size
        self.context = int(getattr(self.model.config, "max_position_embeddings", 2048))
        self._version = 0
        torch.manual_seed(seed)

    @property
    def weights_version(self) -> int:
        return self._version

    def generate(self, prompts: Sequence[str], sampling: SamplingParams
                 ) -> list[list[Completion]]:
        # A prompt is plain text (few-shot; chat prompts go to the openai backend, whose server
        # applies the template): a special token's spelling in it (a generated task's `<eos>`)
        # stays characters (red-team pass 15); learner/logprobs.encode does the same.
        encoded = [self.tokenizer(p, add_special_tokens=True, split_special_tokens=True).input_ids
                   for p in prompts]
        for i, ids in enumerate(encoded):
            if len(ids) + sampling.max_tokens > self.context:
                raise PromptTooLong(i, len(ids), sampling.max_tokens, self.context)
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        per_batch = max(1, self.max_batch_size // sampling.n)
        results: list[list[Completion]] = []
        for start in range(0, len(encoded), per_batch):
            results += self._generate_batch(encoded[start:start + per_batch], sampling)
        return results

    @torch.inference_mode()
    def _generate_batch(self, encoded: list[list[int]], sampling: SamplingParams
                        ) -> list[list[Completion]]:
        # Each prompt repeated n times rather than num_return_sequences: the same batch, and
        # transformers refuses num_return_sequences > 1 for greedy decoding.
        rows = [ids for ids in encoded for _ in range(sampling.n)]
        batch = self.tokenizer.pad({"input_ids": rows}, return_tensors="pt").to(self.device)
        greedy = sampling.temperature == 0
        output = self.model.generate(
            **batch, max_new_tokens=sampling.max_tokens,
            do_sample=not greedy, temperature=None if greedy else sampling.temperature,
            top_p=None if greedy else sampling.top_p, top_k=None,
            min_p=None if greedy or not sampling.min_p else sampling.min_p,
            stop_strings=list(sampling.stop) or None, tokenizer=self.tokenizer,
            pad_token_id=self.tokenizer.pad_token_id)
        new_tokens = output[:, batch["input_ids"].shape[1]:]
        completions = [self._completion(row, sampling, len(encoded[i // sampling.n]))
                       for i, row in enumerate(new_tokens)]
        return [completions[i:i + sampling.n] for i in range(0, len(completions), sampling.n)]

    def _completion(self, row: torch.Tensor, sampling: SamplingParams, prompt_tokens: int
                    ) -> Completion:
        ids = row.tolist()
        eos = self.tokenizer.eos_token_id
        ended = eos in ids
        if ended:
            ids = ids[:ids.index(eos) + 1]
        else:  # after an early stop the row is padded to the batch's length
            while ids and ids[-1] == self.tokenizer.pad_token_id:
                ids.pop()
        text, stopped = cut_at_stop(self.tokenizer.decode(ids, skip_special_tokens=True),
                                    sampling.stop)
        finished = ended or stopped or len(ids) < sampling.max_tokens
        return Completion(text=text, prompt_tokens=prompt_tokens, completion_tokens=len(ids),
                          finish_reason="stop" if finished else "length",
                          weights_version=self._version)

    def update_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        check_version(self._version, version)
        missing, unexpected = self.model.load_state_dict(dict(state_dict), strict=False)
        if unexpected or [k for k in missing if "lm_head" not in k or
                          not self.model.config.tie_word_embeddings]:
            raise ValueError(f"state dict does not match the model: missing {missing[:5]}, "
                             f"unexpected {unexpected[:5]}")
        self._version = version

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def close(self) -> None:
        self.model = None
