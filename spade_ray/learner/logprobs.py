"""Log-probabilities of completions given prompts: what is scored, how it is batched.

What is scored. A solver prompt for a base model ends with the task's signature and the
candidate program is that signature plus the model's continuation (tasks.prompting's
`candidate_program`); pairs carry the program. `split_program(prompt, program)` therefore moves
the signature from the prompt's end to the completion: the context is the prompt up to where
the signature line starts, the completion is the whole program. Chosen and rejected share that
context and that signature, so the signature tokens' log-probs are identical for both and cancel
in every DPO margin; tokenising the context on a line boundary also avoids a token that would
straddle the prompt / completion split. When the program does not start with a line the prompt
ends with (chat prompts: the program is a code block taken out of the answer), the whole
program is scored as a continuation of the whole prompt, an approximation of what was sampled.

Batching. Sequences are prompt ids + completion ids (tokenised separately, as TRL does; the
prompt with the tokenizer's special tokens, the completion without, and no EOS appended: base-
model completions end at stop strings, not at EOS). Rows are right-padded to the batch's
longest, so position ids start at 0 on every row with no position_ids argument. One forward per
batch; `logits_to_keep` skips the lm_head (and the [L, vocab] logits, 262k wide for Gemma 3) on
the prompt positions before the earliest completion token in the batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor


@dataclasses.dataclass(frozen=True)
class TokenBatch:
    """Right-padded token ids; completion_mask is 1 where input_ids holds a completion token."""

    input_ids: Tensor  # [B, L] long
    attention_mask: Tensor  # [B, L] long
    completion_mask: Tensor  # [B, L] long

    def __len__(self) -> int:
        return self.input_ids.shape[0]


def split_program(prompt: str, program: str) -> tuple[str, str]:
    """(context, completion) to score for a candidate program written after `prompt`."""
    first_line = program.split("\n", 1)[0]
    stripped = prompt.rstrip()
    if first_line.strip() and stripped.endswith(first_line):
        return stripped[:len(stripped) - len(first_line)], program
    return prompt, program


def encode(tokenizer: Any, context: str, completion: str, max_length: int
           ) -> tuple[list[int], list[int]]:
    """Prompt and completion ids, truncated to `max_length` tokens together: the completion
    keeps its first max_length - 1 tokens, the prompt its last tokens (TRL's keep_end), at least
    one so that the first completion token has something to be predicted from."""
    if max_length < 2:
        raise ValueError(f"max_length must be >= 2 (a prompt token and a completion token), "
                         f"got {max_length}")
    prompt_ids = list(tokenizer(context, add_special_tokens=True)["input_ids"])
    completion_ids = list(tokenizer(completion, add_special_tokens=False)["input_ids"])
    if not prompt_ids:
        prompt_ids = [pad_id(tokenizer) if tokenizer.bos_token_id is None
                      else tokenizer.bos_token_id]
    completion_ids = completion_ids[:max_length - 1]
    prompt_ids = prompt_ids[-(max_length - len(completion_ids)):]
    return prompt_ids, completion_ids


def collate(encoded: Sequence[tuple[list[int], list[int]]], pad_token_id: int) -> TokenBatch:
    """Right-pad (prompt ids, completion ids) rows into one TokenBatch."""
    if not encoded:
        raise ValueError("collate needs at least one sequence")
    length = max(len(p) + len(c) for p, c in encoded)
    ids = torch.full((len(encoded), length), pad_token_id, dtype=torch.long)
    attention = torch.zeros((len(encoded), length), dtype=torch.long)
    completion = torch.zeros((len(encoded), length), dtype=torch.long)
    for row, (p, c) in enumerate(encoded):
        ids[row, :len(p) + len(c)] = torch.tensor(p + c, dtype=torch.long)
        attention[row, :len(p) + len(c)] = 1
        completion[row, len(p):len(p) + len(c)] = 1
    return TokenBatch(ids, attention, completion)


def token_logps(model: Callable[..., Any], batch: TokenBatch) -> tuple[Tensor, Tensor]:
    """Per-token log-probs of the completion tokens, ([B, T], mask [B, T]) over the last T
    positions of the batch (T covers every completion token of every row; 0 where masked).

    Log-probs are taken in float32 (gather minus logsumexp) whatever the model's dtype: a bf16
    log-softmax loses ~0.01 nats per token, too much for sums over hundreds of tokens.
    """
    starts = batch.completion_mask.float().argmax(dim=1)
    has_completion = batch.completion_mask.any(dim=1)
    first = int(starts[has_completion].min()) if bool(has_completion.any()) else \
        batch.input_ids.shape[1] - 1
    length = batch.input_ids.shape[1]
    # Logits at positions first-1 .. L-2 predict the tokens at first .. L-1.
    keep = length - first + 1
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                logits_to_keep=keep, use_cache=False)
    logits = out.logits[:, :-1, :]
    targets = batch.input_ids[:, first:]
    if logits.shape[1] != targets.shape[1]:
        raise RuntimeError(f"the model returned logits for {out.logits.shape[1]} positions, "
                           f"expected {keep}: it does not honour logits_to_keep")
    logits = logits.float()
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    logps = picked - torch.logsumexp(logits, dim=-1)
    mask = batch.completion_mask[:, first:]
    return logps * mask, mask


def sequence_logps(model: Callable[..., Any], batch: TokenBatch) -> tuple[Tensor, Tensor]:
    """Summed completion log-probs [B] and completion token counts [B], one forward."""
    logps, mask = token_logps(model, batch)
    return logps.sum(dim=1), mask.sum(dim=1)


def pad_id(tokenizer: Any) -> int:
    """The id right-padding uses (masked out everywhere, so any real id works)."""
    for token_id in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return int(token_id)
    raise ValueError("the tokenizer has neither a pad nor an EOS token to pad batches with")
