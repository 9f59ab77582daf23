"""What a candidate program is: built from the solver's completion, split again for scoring.

A solver prompt for a base model ends with the task's signature, and the candidate program is
that signature plus the model's continuation (`candidate_program`); pairs and groups carry the
program. `split_program(prompt, program)` undoes the join for the learner: the context is the
prompt up to where the signature line starts, the completion is the whole program. Chosen and
rejected share that context and that signature, so the signature tokens' log-probs are
identical for both and cancel in every DPO margin; tokenising the context on a line boundary
also avoids a token that would straddle the prompt / completion split. When the program does
not start with a line the prompt ends with (chat prompts: the program is a code block taken out
of the answer), the whole program is scored as a continuation of the whole prompt, an
approximation of what was sampled.
"""

from __future__ import annotations

import re

from spade_ray.records import Task

_CODE_BLOCK = re.compile(r"```(?:python)?\n(.*?)(?:```|$)", re.DOTALL)


def candidate_program(task: Task, completion: str, chat: bool) -> str:
    """The program to check: a chat answer's code block, or the signature the base-model
    prompt ended with plus the body the model continued with."""
    if chat:
        match = _CODE_BLOCK.search(completion)
        code = (match.group(1) if match else completion).strip("\n") + "\n"
    else:
        code = f"{task.signature}{completion}".rstrip() + "\n"
    # What the model wrote is run as it is, even when it cannot run: a NUL byte (which the
    # sandbox refuses as input) becomes U+FFFD, a syntax error the candidate is scored on.
    code = code.replace("\x00", "\ufffd")
    return code if code.strip() else "# the model wrote no code\n"


def split_program(prompt: str, program: str) -> tuple[str, str]:
    """(context, completion) to score for a candidate program written after `prompt`."""
    first_line = program.split("\n", 1)[0]
    stripped = prompt.rstrip()
    if first_line.strip() and stripped.endswith(first_line):
        return stripped[:len(stripped) - len(first_line)], program
    return prompt, program
