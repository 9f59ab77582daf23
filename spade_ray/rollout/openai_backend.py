"""`openai` backend: any OpenAI-compatible server (vLLM's `vllm serve`, SGLang, a hosted API).

One request per prompt asks for its n completions (`n=`), on the completions endpoint for base
models or chat.completions (`chat=True`, the prompt as one user message). Requests run on a
thread pool of `max_concurrency`; the official SDK retries connection errors, timeouts, 408,
409, 429 and 5xx with exponential backoff (`max_retries`, openai-python's `_base_client`), and
what still fails is mapped to our errors: no answer -> ServerUnavailable naming the URL, a prompt
over the model's context -> PromptTooLong (or a RolloutError with the server's message when it
gives no token counts).

Token counts: the API reports `usage` per request, not per completion. prompt_tokens is the
request's. With n > 1, a completion that finished by "length" used exactly max_tokens; the rest
of the request's completion_tokens are apportioned over the others by text length, so the sum
is always exact and a count is exact whenever at most one completion stopped early.

A prompt that fits the context but leaves less than max_tokens room is not refused by vLLM's
server: it generates up to the context and reports "length" (unlike the hf / vllm backends,
which raise PromptTooLong; the server's context is not known here).

`min_p` goes in the request body as vLLM's and SGLang's servers take it; OpenAI's own API has
no such parameter and refuses the request, which then fails with the server's message.

Texts from the server are made valid Unicode (`valid_text`) before they leave the backend.

Non-goals: the weights behind an API are not ours: update_weights raises ReadOnlyBackend and
weights_version stays 0. No streaming, no tool calls.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from spade_ray.records import Completion, SamplingParams
from spade_ray.rollout.backend import (
    PromptTooLong,
    ReadOnlyBackend,
    RolloutError,
    ServerUnavailable,
    cut_at_stop,
)

# Local servers (vllm serve without --api-key) accept any key, but the SDK insists on one.
DUMMY_API_KEY = "EMPTY"
_CONTEXT = re.compile(r"maximum context length is (\d+)")
_PROMPT_TOKENS = re.compile(r"(\d+) (?:input tokens|tokens in your prompt|in your prompt)")


class OpenAIBackend:
    name = "openai"

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY",
                 chat: bool = False, timeout_s: float = 60, max_retries: int = 3,
                 max_concurrency: int = 8) -> None:
        import openai

        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.base_url, self.model, self.chat = base_url, model, chat
        self.max_retries = max_retries
        self.client = openai.OpenAI(base_url=base_url,
                                    api_key=os.environ.get(api_key_env) or DUMMY_API_KEY,
                                    timeout=timeout_s, max_retries=max_retries)
        self.pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix="openai-backend")

    @property
    def weights_version(self) -> int:
        return 0  # the server's weights are not ours to version

    def generate(self, prompts: Sequence[str], sampling: SamplingParams
                 ) -> list[list[Completion]]:
        return list(self.pool.map(lambda i: self._request(i, prompts[i], sampling),
                                  range(len(prompts))))

    def _request(self, index: int, prompt: str, sampling: SamplingParams) -> list[Completion]:
        import openai

        # vLLM's server refuses n > 1 with greedy decoding; its n samples would be identical.
        copies = sampling.n if sampling.temperature == 0 else 1
        # seed + index: see vllm_backend._params (decorrelates the prompts of one call).
        common = dict(model=self.model, n=sampling.n // copies, temperature=sampling.temperature,
                      top_p=sampling.top_p, stop=list(sampling.stop) or None,
                      seed=None if sampling.seed is None else sampling.seed + index)
        if sampling.min_p:  # not in OpenAI's API: vLLM's and SGLang's servers read it here
            common["extra_body"] = {"min_p": sampling.min_p}
        try:
            if self.chat:
                response = self.client.chat.completions.create(
                    messages=[{"role": "user", "content": prompt}],
                    max_completion_tokens=sampling.max_tokens, **common)
                texts = [(c.index, c.message.content or "", c.finish_reason)
                         for c in response.choices]
            else:
                response = self.client.completions.create(
                    prompt=prompt, max_tokens=sampling.max_tokens, **common)
                texts = [(c.index, c.text, c.finish_reason) for c in response.choices]
        except openai.APIConnectionError as e:  # also APITimeoutError
            raise ServerUnavailable(
                f"no answer from the OpenAI-compatible server at {self.base_url} after "
                f"{self.max_retries + 1} attempts ({type(e).__name__}: {e}): is it running "
                "and is base_url right (it usually ends in /v1)?") from e
        except openai.APIStatusError as e:
            raise self._status_error(e, index, sampling) from e
        completions = self._completions(sorted(texts, key=lambda t: t[0]), response.usage,
                                        sampling)
        return completions * copies

    def _status_error(self, e: Any, index: int, sampling: SamplingParams) -> RolloutError:
        message = _server_message(e)
        if e.status_code >= 500:
            return ServerUnavailable(f"the server at {self.base_url} kept failing (HTTP "
                                     f"{e.status_code} after {self.max_retries} retries): "
                                     f"{message}")
        if e.status_code == 400 and "context length" in message:
            context, prompt_tokens = _CONTEXT.search(message), _PROMPT_TOKENS.search(message)
            if context and prompt_tokens:
                error = PromptTooLong(index, int(prompt_tokens.group(1)), sampling.max_tokens,
                                      int(context.group(1)))
                error.add_note(f"server at {self.base_url}: {message}")  # e.g. "at least N"
                return error
            return RolloutError(f"prompt {index} does not fit the context of model "
                                f"{self.model!r} at {self.base_url}: {message}")
        return RolloutError(f"the server at {self.base_url} refused prompt {index} for model "
                            f"{self.model!r} (HTTP {e.status_code}): {message}")

    def _completions(self, choices: list[tuple[int, str, str | None]], usage: Any,
                     sampling: SamplingParams) -> list[Completion]:
        if usage is None:
            raise RolloutError(f"the server at {self.base_url} sent no token usage; spade-ray "
                               "meters tokens per role and needs it")
        cut = [cut_at_stop(valid_text(text), sampling.stop) for _, text, _ in choices]
        counts = _split_usage(usage.completion_tokens, [reason for _, _, reason in choices],
                              [len(text) for text, _ in cut], sampling.max_tokens)
        # "length" is the only truncation; EOS, a stop string, a content filter all end it.
        return [Completion(text=text, prompt_tokens=usage.prompt_tokens, completion_tokens=count,
                           finish_reason="length" if reason == "length" and not stopped
                           else "stop", weights_version=0)
                for (text, stopped), count, (_, _, reason) in zip(cut, counts, choices)]

    def update_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        raise ReadOnlyBackend(f"the openai backend serves {self.model!r} from {self.base_url}; "
                              "its weights cannot be updated from here: train with the hf or "
                              "vllm backend, or serve the new checkpoint and point base_url at it")

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()


def valid_text(text: str) -> str:
    """`text` as valid Unicode, which UTF-8 (the trace, the dataset export, W&B) can encode. The
    server's JSON may carry `\\ud800` escapes, which decode to lone surrogates: one completion
    holding one made TraceStore.record_* and save_dataset raise UnicodeEncodeError (red-team
    pass 15, F9; the hf and vllm backends decode tokens and never make one). A lone surrogate
    becomes U+FFFD; two that form a pair become their character."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def _server_message(e: Any) -> str:
    body = e.body if isinstance(e.body, dict) else {}
    error = body.get("error", body)
    message = error.get("message") if isinstance(error, dict) else None
    return str(message or body.get("message") or e.message)


def _split_usage(total: int, reasons: list[str | None], text_lengths: list[int],
                 max_tokens: int) -> list[int]:
    """A request's completion tokens per completion (see the module docstring)."""
    early = [i for i, reason in enumerate(reasons) if reason != "length"]
    rest = total - max_tokens * (len(reasons) - len(early))
    if rest < len(early) or (not early and rest != 0):  # a server that counts differently
        return _apportion(total, text_lengths)
    counts = [max_tokens] * len(reasons)
    if early:
        for i, count in zip(early, _apportion(rest, [text_lengths[i] for i in early])):
            counts[i] = count
    return counts


def _apportion(total: int, weights: list[int]) -> list[int]:
    """`total` split over `weights` proportionally, in integers that sum to `total`."""
    if len(weights) == 1:
        return [total]
    weights = [w + 1 for w in weights]  # an empty text still took at least its EOS token
    shares = [total * w / sum(weights) for w in weights]
    counts = [int(s) for s in shares]
    by_remainder = sorted(range(len(shares)), key=lambda i: counts[i] - shares[i])
    for i in by_remainder[:total - sum(counts)]:
        counts[i] += 1
    return counts
