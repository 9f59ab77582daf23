"""Self-play sampling on top of any generate(): distinct candidates per prompt, token budgets.

Duplicates among a prompt's candidates waste sandbox time and give DPO no signal, so after each
call the duplicates (by normalised text) are dropped and re-sampled, up to `resample_rounds`
extra calls; what was sampled is counted either way (RoundMetrics.candidate_diversity). A
`TokenMeter` counts prompt and completion tokens per role and refuses calls once a cap is
reached, so a round can be capped in cost.
"""

from __future__ import annotations

import dataclasses
import io
import tokenize
from collections.abc import Callable, Sequence

from spade_ray.records import Completion, SamplingParams
from spade_ray.rollout.backend import RolloutError

# None for a prompt lost with a dead engine (RoleEngines): it stays wanted and is re-issued;
# [] for one the engine refused (too long for its context: backend.generate_fitting): it is not.
Generate = Callable[[Sequence[str], SamplingParams], list[list[Completion] | None]]


class TokenBudgetExceeded(RolloutError):
    """A role used its token cap; no further calls until the next round's meter."""


def normalise(text: str) -> str:
    """What counts as 'the same program': the same tokens on the same lines at the same depth
    of indentation. Indentation is meaning (a `return` one level out is another program, the
    commonest bug of a small model) and so is the text of a string (`split(' ')` is not
    `split('  ')`); the spacing between tokens, blank lines and a line continuation are not.
    Text that does not tokenize (an unclosed bracket or string) is compared by its lines, each
    at its own indentation with the whitespace inside it collapsed."""
    try:
        return _token_lines(text)
    except (tokenize.TokenError, SyntaxError):
        lines = (line.rstrip() for line in text.split("\n"))
        return "\n".join(line[:len(line) - len(line.lstrip())] + " ".join(line.split())
                         for line in lines if line)


def _token_lines(text: str) -> str:
    lines, line, depth = [], [], 0
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.INDENT:
            depth += 1
        elif token.type == tokenize.DEDENT:
            depth -= 1
        elif token.type in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER):
            if line:
                lines.append("    " * depth + " ".join(line))
            line = []
        else:
            line.append(token.string)
    return "\n".join(lines)


@dataclasses.dataclass
class TokenMeter:
    """Tokens used by one role, with an optional cap on prompt + completion tokens."""

    role: str
    cap: int | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def check(self) -> None:
        if self.cap is not None and self.total >= self.cap:
            raise TokenBudgetExceeded(f"{self.role} used {self.total} tokens of its cap "
                                      f"{self.cap}")

    def add(self, completions: list[list[Completion]]) -> None:
        self.calls += 1
        for group in completions:
            for c in group:
                self.prompt_tokens += c.prompt_tokens
                self.completion_tokens += c.completion_tokens


@dataclasses.dataclass(frozen=True)
class DistinctSample:
    completions: list[list[Completion]]  # distinct texts per prompt, up to n each
    draws: list[list[int]]  # draws[i][k]: how many of the prompt's draws gave completions[i][k]
    sampled: int  # completions generated, re-samples included
    duplicates: int  # of those, how many repeated an earlier one of the same prompt
    lost: int  # prompt requests lost with a dead engine (re-issued while rounds remained)
    refused: tuple[int, ...] = ()  # the prompts the engine refused: no completion


def sample_distinct(generate: Generate, prompts: Sequence[str], sampling: SamplingParams,
                    meter: TokenMeter, resample_rounds: int = 2) -> DistinctSample:
    """`sampling.n` distinct completions per prompt where the model gives them, and how many
    draws gave each: what the model would answer is the draws' share, not the kept texts'
    (red-team pass 10: a solver right on 90% of its draws keeps {right, wrong}, a pass rate of
    0.5 that the generator's reward paid most for)."""
    kept: list[list[Completion]] = [[] for _ in prompts]
    draws: list[list[int]] = [[] for _ in prompts]
    seen: list[dict[str, int]] = [{} for _ in prompts]  # normalised text -> its index in kept
    wanted = {i: sampling.n for i in range(len(prompts))}
    refused: set[int] = set()
    sampled = duplicates = lost = 0
    for attempt in range(1 + resample_rounds):
        if not wanted:
            break
        meter.check()
        # One call per distinct missing count keeps n fixed within a call.
        for n in sorted(set(wanted.values())):
            indices = [i for i, k in wanted.items() if k == n]
            params = dataclasses.replace(sampling, n=n, seed=None if sampling.seed is None
                                         else sampling.seed + attempt)
            result = generate([prompts[i] for i in indices], params)
            meter.add([group for group in result if group is not None])
            for i, group in zip(indices, result):
                if group is None:
                    lost += 1
                    continue
                if not group:
                    refused.add(i)
                for c in group:
                    sampled += 1
                    key = normalise(c.text)
                    if key in seen[i]:
                        duplicates += 1
                        draws[i][seen[i][key]] += 1
                    else:
                        seen[i][key] = len(kept[i])
                        kept[i].append(c)
                        draws[i].append(1)
        wanted = {i: sampling.n - len(kept[i]) for i in range(len(prompts))
                  if len(kept[i]) < sampling.n and i not in refused}
    return DistinctSample(kept, draws, sampled, duplicates, lost, tuple(sorted(refused)))
