"""Examples a task's description states: they are shown ones, whatever the task calls them.

The codegen and repair prompts show the description, so an example it states (`digit_mix(67) ==
57`, "for 67 the answer is 57", a table of the values in any spelling) is in the prompt: it
earns no partial credit, and admission counts it in trivial_passes:lookup and Task.most_shown
(tasks/guesses.py). Red-team passes 11-13 admitted descriptions listing the hidden examples,
and a table of them passed every one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from spade_ray.execution import canonical
from spade_ray.records import IOExample

STATED_GAP = 40  # characters between an argument list and its output in a description (stated)


def stated(description: str, examples: Sequence[IOExample]) -> list[int]:
    """The examples the description states: an argument list (in brackets, or bare when it
    and the output have four characters or more) and, at most STATED_GAP characters after it,
    the output, each as Python writes it (`digit_mix(67) == 57`, "for 67 the answer is 57"); or
    both anywhere, in any order, when the output has two characters or more ("57 is what
    digit_mix(67) gives", the inputs and the outputs as two lists). The codegen and repair
    prompts show the description, so these are shown examples whatever the task calls them
    (red-team pass 11: a description listing the hidden examples was admitted, and a table of
    it passed every one with augment_inputs 0; pass 12: the same, the output written first).
    The same holds for the values' words and numbers in any other spelling (`_tokens_state`):
    `f([8,2,6,5],1)=49`, or a table `8 2 6 5; 1; 49 | 7; 3; 1` (pass 13)."""
    out = []
    words = _tokens(description)
    for i, e in enumerate(examples):
        args, expected = canonical.decode(e.args), canonical.decode(e.expected)
        if _tokens_state(words, [_value_tokens(a) for a in args], _value_tokens(expected)):
            out.append(i)
            continue
        calls = {", ".join(map(repr, args)), ", ".join(map(str, args))} - {""}
        answers = {repr(expected), str(expected)} - {""}
        if any(re.search(rf"{left}{re.escape(call)}{right}.{{0,{STATED_GAP}}}?(?<!\w)"
                         rf"{re.escape(answer)}(?!\w)", description, re.DOTALL)
               for call in calls for answer in answers
               for left, right in ((r"\(", r"\)"), (r"(?<!\w)", r"(?!\w)"))
               if left == r"\(" or len(call) + len(answer) >= 4) or any(
                   _said(call, description) and _said(answer, description)
                   for call in calls for answer in answers
                   if len(answer) >= 2 and len(call) + len(answer) >= 4):
            out.append(i)  # ("7 ... 3" is no example)
    return out


# a number (its sign when no word precedes it) or a word: what survives any spelling of a value
_TOKEN = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?|[^\W\d_]\w*|\d+")
STATED_TOKEN_GAP = 4  # words between an argument list's last value and its output (stated)


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def _value_tokens(value) -> list[str]:
    """The words and numbers a value shows, in order, however it is spelt: the items of a
    container, a string's words, a number or a constant as Python writes it."""
    out, stack = [], [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(reversed([x for kv in item.items() for x in kv]))
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(reversed(sorted(item, key=repr) if isinstance(item, (set, frozenset))
                                  else list(item)))
        elif isinstance(item, bytes):
            out += _tokens(item.decode("latin-1"))
        else:
            out += _tokens(item if isinstance(item, str) else repr(item))
    return out


def _tokens_state(words: list[str], args: list[list[str]], expected: list[str]) -> bool:
    """Whether the description's words hold the arguments' tokens (`args`: per argument) in
    order, each argument's in a row, at most STATED_TOKEN_GAP words apart (`k=1`, "with 1"),
    and the output's in a row elsewhere: right after the arguments or right before them
    (within STATED_TOKEN_GAP words), or anywhere when the output is two characters or more;
    never when the two together are under four characters ("7 ... 3" is no example), as for
    the spellings above."""
    flat = [t for run in args for t in run]
    if not flat or not expected or len("".join(flat + expected)) < 4:
        return False
    runs = [run for run in args if run]
    spans = [span for i in _found(words, runs[0], 0, len(words))
             if (span := _chain(words, runs, i)) is not None]
    ends = _found(words, expected, 0, len(words))
    anywhere = len("".join(expected)) >= 2
    return any(j >= end and (anywhere or j - end <= STATED_TOKEN_GAP)
               or j + len(expected) <= start and (anywhere or start - j - len(expected)
                                                  <= STATED_TOKEN_GAP)
               for start, end in spans for j in ends)


def _found(words: list[str], run: list[str], low: int, high: int) -> list[int]:
    """Where `run` starts in `words`, starting from low up to high."""
    return [i for i in range(low, min(high, len(words) - len(run)) + 1)
            if words[i:i + len(run)] == run]


def _chain(words: list[str], runs: list[list[str]], start: int) -> tuple[int, int] | None:
    """The span of the runs in order from `start`, each the first within STATED_TOKEN_GAP words
    of the last, or None."""
    end = start + len(runs[0])
    for run in runs[1:]:
        found = _found(words, run, end, end + STATED_TOKEN_GAP)
        if not found:
            return None
        end = found[0] + len(run)
    return start, end


def _said(text: str, description: str) -> bool:
    """Whether the description holds `text` as a whole (not inside a longer word or number)."""
    return re.search(rf"(?<!\w){re.escape(text)}(?!\w)", description) is not None


def stated_first(own: list[tuple[IOExample, int]], description: str, visible: int
                 ) -> tuple[list[tuple[IOExample, int]], int]:
    """The generator's examples with those its description states (stated) moved up
    beside the `visible` ones, and how many the prompt shows: all of those, since the prompt
    shows the description. Red-team pass 11: a description listing the hidden examples was
    admitted, and with augment_inputs 0 a table of it passed every one; now they are shown
    ones, which earn no partial credit and count in trivial_passes:lookup and Task.most_shown."""
    said = set(stated(description, [e for e, _ in own[visible:]]))
    later = list(enumerate(own[visible:]))
    return (own[:visible] + [x for i, x in later if i in said]
            + [x for i, x in later if i not in said], min(len(own), visible) + len(said))
