"""The one seam every model backend implements (hf, vllm, openai), and what they share.

A backend turns prompts into `n` completions each, counts tokens, and stamps every completion
with its `weights_version`. Backends that serve trainable weights load new ones in place
(`update_weights`) without restarting; read-only ones (an external API) refuse with a clear error.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from spade_ray.records import Completion, SamplingParams

BACKENDS = ("hf", "vllm", "openai")  # what rollout.actor.make_backend builds

class RolloutError(RuntimeError):
    """Base of the rollout errors below."""


class ModelLoadError(RolloutError):
    """The model (path, hub id, GGUF) cannot be loaded; the message names it and says why."""


class PromptTooLong(RolloutError, ValueError):
    """A prompt does not fit the context window with room for the requested new tokens."""

    def __init__(self, index: int, prompt_tokens: int, max_tokens: int, context: int) -> None:
        super().__init__(f"prompt {index} has {prompt_tokens} tokens; with max_tokens="
                         f"{max_tokens} it needs {prompt_tokens + max_tokens} but the model's "
                         f"context is {context}: shorten the prompt or lower max_tokens")
        self.index = index
        self._fields = (index, prompt_tokens, max_tokens, context)

    def __reduce__(self):  # picklable across Ray: rebuilt from its fields, not its message
        return type(self), self._fields


class ReadOnlyBackend(RolloutError):
    """The backend serves weights we do not own (an external API): no update_weights."""


class EngineDead(RolloutError):
    """The backend's engine is gone for good (e.g. vLLM's engine-core process died): every later
    call would fail too. The process hosting the backend must be replaced (ModelActor exits so
    that Ray restarts it)."""


class ServerUnavailable(RolloutError):
    """An API server did not answer (down, refused, timed out after the retries)."""


@runtime_checkable
class ModelBackend(Protocol):
    """What the model actor and the loop rely on. See hf_backend.py for the reference one."""

    name: str  # "hf" | "vllm" | "openai"

    @property
    def weights_version(self) -> int: ...

    def generate(self, prompts: Sequence[str], sampling: SamplingParams
                 ) -> list[list[Completion]]:
        """`sampling.n` completions per prompt, in prompt order."""

    def update_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Load new weights in place; later completions carry `version` (must increase)."""

    def close(self) -> None: ...


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """The text before the earliest stop string, and whether one was found."""
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def check_version(current: int, new: int) -> None:
    if not isinstance(new, int) or new <= current:
        raise ValueError(f"weights version must increase: current {current}, got {new!r}")


def generate_fitting(backend: ModelBackend, prompts: Sequence[str], sampling: SamplingParams
                     ) -> list[list[Completion]]:
    """backend.generate, with no completion ([]) for each prompt that does not fit the model's
    context (PromptTooLong, said on stderr): one such prompt failed the whole call, and with it
    the solving of every task batched with it (red-team pass 15: a generated task whose shown
    outputs were 2,000 rare characters each made a 16,156-token solver prompt)."""
    refused: set[int] = set()
    while True:
        kept = [i for i in range(len(prompts)) if i not in refused]
        try:
            groups = backend.generate([prompts[i] for i in kept], sampling) if kept else []
        except PromptTooLong as e:
            refused.add(kept[e.index])
            print(f"prompt {kept[e.index]} of {len(prompts)} refused: {e}", file=sys.stderr,
                  flush=True)
            continue
        out: list[list[Completion]] = [[] for _ in prompts]
        for i, group in zip(kept, groups):
            out[i] = group
        return out
