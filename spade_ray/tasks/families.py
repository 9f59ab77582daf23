"""Task families on the solver's side: the prompt each shows, and what a completion becomes.

One admitted program (tasks/admission.py) can become a task of any family:

    codegen  write the function from its description and the visible examples; every example
             grades (exact data, compared by the trusted grader)
    repair   the same, given a mutant of the reference that the examples catch
    predict  given the program and one call, state the result; the answer is graded as data:
             the candidate's text must be a Python literal (ast.literal_eval, run in the
             sandbox), never code that could run the program it was shown

Each family has its own prompt template (conf/prompts/<variant>.yaml, keyed by family) and few-
shot examples of the same family. A candidate's `code` is what the model wrote (so preference
pairs train on the model's own text); `executable` is what the sandbox runs for it.
"""

from __future__ import annotations

import ast
import re
import textwrap

from spade_ray.evaluation import scoring
from spade_ray.execution import MAX_CODE_BYTES, canonical
from spade_ray.records import IOExample, Task, TaskFamily
from spade_ray.tasks.format import call_text, shown_program
from spade_ray.tasks.imports import with_missing_imports
from spade_ray.tasks.making import PREDICT_ENTRY
from spade_ray.tasks.templates import PromptTemplate, render

# A fenced block as Markdown has it: a line opening with ``` or ~~~ (indented or not, any info
# string: ```python, ```py, ``` Python3), up to a line closing with the same fence or the end.
# Matched anywhere, ```python alone took an inline ``` in the prose, or the closing fence of a
# ```py block, as an opening one, and the prose after it became the code.
_CODE_BLOCK = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[^\n`]*\n(?P<body>.*?)"
                         r"(?:^[ \t]*(?P=fence)[ \t]*$|\Z)", re.MULTILINE | re.DOTALL)
# A predict answer written over several lines is the shortest run of leading lines that makes
# one expression; longer texts are not parsed on the host (64 parses of 4,000 characters: 60 ms).
_ANSWER_LINES, _ANSWER_CHARS = 64, 4_000


def solver_prompt(templates: dict[str, PromptTemplate], task: Task, examples: list[Task],
                  shots: int, tokenizer=None, hints: int | None = None) -> str:
    """The prompt of `task`'s family, with the first `shots` examples of the same family other
    than the task itself (a replayed seed task must not show its own solution); `hints`: the
    examples a codegen or repair prompt shows of each task (`shown_examples`)."""
    chosen = [t for t in examples if t.family == task.family and t.task_id != task.task_id]
    shown = [{**fields(t, hints), "solution": solution(t)} for t in chosen[:shots]]
    return render(templates[task.family], shown, tokenizer, **fields(task, hints))


def fields(task: Task, hints: int | None = None) -> dict[str, str]:
    """What a family's template may show of a task."""
    if task.family is TaskFamily.PREDICT:
        shown = shown_call(task, 0)
    else:
        shown = "\n".join(f"{example_call(task, e)} == {canonical.decode(e.expected)!r}"
                          for e in shown_examples(task, hints))
        shown = f"Examples:\n{shown}" if shown else ""
    return {"description": task.description, "signature": task.signature, "shown": shown,
            # a bug is the reference mutated, its docstrings written back by ast.unparse: a
            # forged `### Fixed` section in one showed the fix (red-team pass 15, F6)
            "buggy": shown_program(task.buggy) if task.buggy else "",
            "program": shown_program(task.reference)}


def shown_examples(task: Task, hints: int | None) -> tuple[IOExample, ...]:
    """The examples a codegen or repair prompt shows: the task's visible ones (None), fewer
    (a harder task), or more of its examples in order (an easier one: the co-evolution
    controller's hint lever), never more than the task's `most_shown`: at most half of them,
    where admission checked that copying the shown outputs (and a repair task's shown bug)
    still fails the rest."""
    if hints is None:
        return task.visible
    return task.tests.examples[:scoring.shown_examples(task, hints)]


def solution(task: Task) -> str:
    """The answer a few-shot example shows: the reference, or the predicted value."""
    if task.family is TaskFamily.PREDICT:
        return repr(canonical.decode(task.tests.examples[0].expected))
    return task.reference.rstrip()


def shown_call(task: Task, index: int) -> str:
    """`f(1, 'a')`: the call of the task's visible example `index`."""
    return example_call(task, task.visible[index])


def example_call(task: Task, example: IOExample) -> str:
    """`f(1, 'a')`: the call of one of the task's examples."""
    return call_text(task.entry_point, canonical.decode(example.args))


def candidate_program(task: Task, completion: str, chat: bool) -> str:
    """What the solver wrote, as the candidate's code: for a base model the signature the prompt
    ended with plus the body it continued with; for a chat model its code block; for predict,
    the answer's first expression (`predict_answer`)."""
    if chat:
        completion = completion.replace("\r\n", "\n")
        match = _CODE_BLOCK.search(completion)
        code = (textwrap.dedent(match["body"]) if match else completion).strip("\n") + "\n"
    elif task.family is TaskFamily.PREDICT:
        code = completion
    else:  # the prompt ends with the signature's line: the model writes the lines below it
        code = f"{task.signature}\n{completion}".rstrip() + "\n"
    if task.family is TaskFamily.PREDICT:
        code = predict_answer(code)
    # What the model wrote is run as it is, even when it cannot run: a NUL byte (which the
    # sandbox refuses as input) becomes U+FFFD, a syntax error the candidate is scored on.
    code = code.replace("\x00", "\ufffd")
    return code if code.strip() else "# the model wrote nothing\n"


def predict_answer(text: str) -> str:
    """A predict answer: from the first non-empty line, the shortest run of lines that parses
    as one expression (a literal wrapped over lines, `[\n  [1, 2],\n  [4, 10]\n]`, is whole;
    what follows it is not part of it), else that first line (it fails as it is)."""
    lines = text.split("\n")
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        return ""
    lines = lines[first:first + _ANSWER_LINES]
    for end in range(1, len(lines) + 1):
        answer = "\n".join(lines[:end]).strip()
        if len(answer) > _ANSWER_CHARS:
            break
        try:
            ast.parse(answer, mode="eval")
            return answer
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
    return lines[0].strip()


def executable(task: Task, code: str) -> str:
    """The program the sandbox checks for a candidate's code. A predict answer is evaluated as
    a literal inside the candidate's process: a call, a name or an expression is an error.
    Code gets the imports of the standard-library names it uses and never binds
    (tasks/imports.py), as the task's reference did: a base model's prompt ends with the
    signature, so the model has no place above it to write them. Code that does not parse
    runs as it is (its syntax error is its score); code the sandbox would refuse as input (over
    its size cap) runs as a program that raises, so that one candidate's length cannot fail
    the batch it is checked in."""
    if task.family is TaskFamily.PREDICT:
        program = f"import ast\n\n\ndef {PREDICT_ENTRY}():\n    return ast.literal_eval({code!r})\n"
    else:
        try:
            program = with_missing_imports(code)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            program = code
    size = len(program.encode("utf-8", "surrogatepass"))
    if size > MAX_CODE_BYTES:
        return (f"raise ValueError('the program is {size} bytes, over the sandbox limit of "
                f"{MAX_CODE_BYTES}')\n")
    return program
