"""Splitting a candidate program back into the context and the completion the learner scores.

A solver prompt for a base model ends with the task's signature, and the candidate program is
that signature plus the model's continuation (families.candidate_program). `split_program(prompt,
program)` undoes the join for the learner: the context is the prompt up to where the signature
line starts, the completion is the whole program. Chosen and rejected share that context and that
signature, so the signature tokens' log-probs are identical for both and cancel in every DPO
margin; tokenising the context on a line boundary also avoids a token that would straddle the
prompt / completion split. When the program does not start with a line the prompt ends with (a
predict answer, a generator's task, a chat model's code block), the whole program is scored as a
continuation of the whole prompt, which is what was sampled (for chat, an approximation).
"""

from __future__ import annotations


def split_program(prompt: str, program: str) -> tuple[str, str]:
    """(context, completion) to score for a candidate program written after `prompt`: the
    prompt's whole last line moves to the completion when it is the `def` line the program
    starts with (a predict answer `put` once cut the prompt's `### Output` to `### Out`)."""
    first_line = program.split("\n", 1)[0]
    stripped = prompt.rstrip()
    last_line = stripped.rpartition("\n")[2]
    if first_line.lstrip().startswith(("def ", "async def ")) and last_line == first_line:
        return stripped[:len(stripped) - len(first_line)], program
    return prompt, program
