"""The text format the generator writes: a program and the inputs to run it on, no answers.

Execution-grounded (as in Absolute Zero's proposer): the generator writes a description, a
reference function and calls of it; the sandbox runs the reference and its results become the
expected outputs (tasks/admission.py). A 270M model gets hand-computed expected values wrong far
more often than code, so it is never asked for them. A small line-oriented format rather than
JSON: a base model copies labelled sections far more reliably than it balances braces.

    Description: Return the words of s in reverse order, joined by single spaces.
    Reference:
    def reverse_words(s: str) -> str:
        return " ".join(reversed(s.split()))
    Inputs:
    reverse_words("hello world")
    reverse_words("a b c")

Input lines are calls of one function the reference defines, with literal arguments (Python
literals: numbers, strings, bytes, None, booleans, lists, tuples, dicts, sets), positional or
named by the function's parameters (bound to their positions); a call may run over several
lines, as Python allows. The Inputs section ends at the first line that is not such a call, so
a model that rambles on after its last input still wrote a task; a call with the wrong number of
arguments is skipped, and so is one that repeats an earlier input, retyped or not (input_key);
section headers match in any case; a Reference or Inputs section
whose header line is missing is read where the model wrote it (`_unlabelled`). Two repairs: the
import of a standard-library name the reference uses and never binds (`Counter`, `lru_cache`)
is added (tasks/imports.py), and calls of a name a one-function reference does not define call that
function. Parsing is strict about everything else and says what is wrong with a short,
countable reason; it never guesses code. A reference must also be something the host can work
on: one that nests deeper than MAX_AST_DEPTH is `reference_too_deep`, and one Python cannot
write back as text (a non-printable character in an f-string's expression) `reference_syntax`.

Later prompts show what the generator wrote, so nothing it writes may become the frame of
another prompt: lines end with "\n" (or "\r\n") only, and a text that breaks one with any other
line separator is `line_separator`; the signature is rebuilt from the def's syntax tree, never
the line as written; and a program is shown (`shown_program`) as ast.unparse writes it, without
its comments and string statements: every line of it is then code.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import io
import re
import tokenize
from collections.abc import Hashable
from typing import Any

from spade_ray.tasks.imports import with_missing_imports

SECTIONS = ("Description", "Reference", "Inputs")
# a header line: `Inputs:` and what follows it, or the bare word alone on its line (`inputs`)
_HEADER = re.compile(rf"^({'|'.join(SECTIONS)})(?::[ \t]*(.*)|[ \t]*)$", re.IGNORECASE)
MIN_INPUTS = 2
MAX_INPUTS = 12
MAX_LITERAL_CHARS = 400  # one input call; also bounds what ast.literal_eval is given
# Arguments of one call: the partial-credit floor guesses on each and on each pair
# (evaluation/baselines.py), 9 s of host CPU at 10 arguments and 50 s at 60 on 44 examples
# (red-team pass 16); the seed tasks take at most four.
MAX_ARGUMENTS = 8
MAX_CALL_LINES = 8  # a call written over more lines than this is not read as one
# The host walks a reference's syntax tree recursively (mutation, dedup hashes, unparsing), and
# Python's recursion limit fails at ~250 nested terms (`-` * 260 + `a`, a sum of 250 terms);
# hand-written code stays far below this.
MAX_AST_DEPTH = 60
# The line separators of str.splitlines() other than "\n" and "\r\n". The generator's stop
# strings ("\n### END", conf/model/*.yaml) and the prompts' sections are "\n"-separated, so a
# reference that broke its lines with one of these got past the stop strings; the parser, which
# split with splitlines() and joined with "\n", then stored real `### END` / `### Topic` lines,
# and every later generator prompt taking the task as an exemplar showed a forged entry
# (red-team pass 15, F3).
_OTHER_LINE_BREAK = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_CALL_START = re.compile(r"^[A-Za-z_]\w*\(")


class TaskFormatError(ValueError):
    """The text is not a task; `reason` is a short, countable label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class Proposal:
    """A parsed generator output: what admission runs to make a task of it."""

    description: str
    reference: str  # the program; defines `entry_point` at top level
    entry_point: str
    signature: str  # the entry point's def line rebuilt from its syntax tree (_signature),
    # e.g. "def add(a: int, b: int) -> int:"
    inputs: tuple[tuple[Any, ...], ...]  # argument tuples in the order written, distinct
    # (by input_key: the same input retyped is one)
    calls: tuple[str, ...]  # the input lines as written (inputs[i] is calls[i] evaluated;
    # a call of another name than entry_point is written as call_text does)


def parse_proposal(text: str) -> Proposal:
    text = text.replace("\r\n", "\n")
    sections = _unlabelled(_sections(text))
    missing = [s for s in SECTIONS if not sections.get(s, "").strip()]
    if missing:
        raise TaskFormatError("missing_section", f"no {', '.join(missing)} section")
    # After missing_section: a text that is no task is counted as that, whatever it holds (the
    # tiny test model samples bytes, any of them: its outputs stay `missing_section`).
    if found := _OTHER_LINE_BREAK.search(text):
        raise TaskFormatError("line_separator", f"character {found.start()} is {found[0]!r}, a "
                              "line break other than '\\n'; lines may end with '\\n' or "
                              "'\\r\\n' only")
    description = " ".join(sections["Description"].split())
    reference = sections["Reference"].strip("\n") + "\n"
    try:
        reference = with_missing_imports(reference)
        tree = ast.parse(reference)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise TaskFormatError("reference_syntax", f"{type(e).__name__}: {e}") from None
    if _depth(tree) > MAX_AST_DEPTH:
        raise TaskFormatError("reference_too_deep", f"the reference nests deeper than "
                              f"{MAX_AST_DEPTH} syntax levels")
    try:
        ast.unparse(tree)  # what mutation and the signature do with it
    except (ValueError, RecursionError) as e:
        raise TaskFormatError("reference_syntax", f"{type(e).__name__}: {e}") from None
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    if not functions:
        raise TaskFormatError("no_function", "the reference defines no top-level function")
    entry_point, calls, inputs = _inputs(sections["Inputs"], functions)
    if (widest := max(map(len, inputs))) > MAX_ARGUMENTS:
        raise TaskFormatError("too_many_arguments", f"a call of {entry_point} passes {widest} "
                              f"arguments; a task takes at most {MAX_ARGUMENTS}")
    signature = _signature(functions[entry_point])
    return Proposal(description, reference, entry_point, signature, inputs, calls)


def _depth(tree: ast.AST) -> int:
    """How deep the syntax tree nests (without recursion: it is what is being bounded)."""
    deepest, todo = 0, [(tree, 1)]
    while todo:
        node, depth = todo.pop()
        deepest = max(deepest, depth)
        todo += [(child, depth + 1) for child in ast.iter_child_nodes(node)]
    return deepest


FRAME_REASONS = frozenset({"missing_section", "no_inputs", "too_few_inputs"})


def inputs_frame(text: str) -> str | None:
    """For an output that wrote a description and a parsable reference but no usable inputs:
    the text up to the end of its reference plus the start of the Inputs section, a call of its
    first function (`...\nInputs:\nf(`), for the model to continue. None when the output is
    broken before that (nothing to continue) or already has its inputs."""
    text = text.replace("\r\n", "\n")
    try:
        parse_proposal(text)
        return None
    except TaskFormatError as e:
        if e.reason not in FRAME_REASONS or _OTHER_LINE_BREAK.search(text):
            return None  # refused whatever follows (line_separator): nothing to continue
    sections = _unlabelled(_sections(text))
    if not sections.get("Description", "").strip() or not sections.get("Reference", "").strip():
        return None
    reference = sections["Reference"].strip("\n")
    try:
        tree = ast.parse(reference)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    entry = next((n.name for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if entry is None:
        return None
    description = " ".join(sections["Description"].split())
    return f"Description: {description}\nReference:\n{reference}\nInputs:\n{entry}("


def render_proposal(description: str, reference: str, calls: tuple[str, ...]) -> str:
    """The inverse of parse_proposal (few-shot examples are rendered from seed tasks)."""
    return "\n".join([f"Description: {description}", "Reference:", reference.rstrip(), "Inputs:",
                      *calls])


def call_text(entry_point: str, args: tuple[Any, ...]) -> str:
    """A call as the prompts show it: `f(1, 'a')`."""
    return f"{entry_point}({', '.join(map(repr, args))})"


def _signature(node: ast.FunctionDef) -> str:
    """The entry point's def line on one line, rebuilt from its syntax tree (name, parameters,
    defaults, annotations): the solver's prompt ends with it, and a candidate is it plus the
    lines the model writes below. Never the line as written: a comment after its colon that
    itself ends with ':' (`def f(x):  # ### Solution: ...:`) made it a whole header, kept into
    every solver prompt and candidate of the task (red-team pass 15, F5)."""
    header = copy.copy(node)  # without its body and decorators; type parameters (3.12) stay
    header.body, header.decorator_list, header.type_comment = [ast.Pass()], [], None
    return ast.unparse(header).split("\n", 1)[0]


def shown_program(reference: str) -> str:
    """A program as prompts show it (a predict task's program, a repair task's bug, a generator
    exemplar's reference): ast.unparse without its comments and its strings that are statements
    (docstrings). Those were where a generator wrote a predict answer (red-team pass 10 admitted
    `# mix2(123) == 1784`; admission's guesses read the strings that are left) and forged lines
    of a prompt's frame: `### END`, `### Topic`, a repair prompt's `### Fixed` (red-team pass
    15, F3 and F6). Every other string ast.unparse writes on one line, escaped."""
    tree = ast.parse(reference)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            kept = [s for s in body if not (isinstance(s, ast.Expr)
                                            and isinstance(s.value, ast.Constant))]
            node.body = kept or [ast.Pass()]
    return ast.unparse(tree)


def only_code(program: str) -> bool:
    """Whether every line of `program` is code: no comment, no string statement (docstring)
    and no literal that spans lines, the places a line of a prompt's frame can hide in."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(program).readline))
    except (tokenize.TokenError, SyntaxError):
        return False
    if any(t.type == tokenize.COMMENT or (t.type not in (tokenize.NEWLINE, tokenize.NL)
                                          and "\n" in t.string) for t in tokens):
        return False
    return shown_program(program) == ast.unparse(ast.parse(program))


def _sections(text: str) -> dict[str, str]:
    """The text of each section, its lines split at "\n" only (the callers read "\r\n" as
    "\n" first; parse_proposal refuses the other line separators)."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.split("\n"):
        match = _HEADER.match(line)
        if match and match.group(1).capitalize() not in sections:
            current = match.group(1).capitalize()
            sections[current] = [match.group(2)] if match.group(2) else []
        elif current is not None:
            sections[current].append(line)
    return {name: "\n".join(lines).strip("\n") for name, lines in sections.items()}


_CODE_START = re.compile(r"^(def |async def |import |from \S+ import |@)")


def _unlabelled(sections: dict[str, str]) -> dict[str, str]:
    """The sections with those whose header line the model left out read from where it put
    them (5 of 48 outputs of bench/generator_admission.py lacked a section, 3 of them only a
    header): a Reference without its `Reference:` line starts at the first line of code (a def,
    an import or a decorator at the start of a line) in the Description, and Inputs without
    theirs at the first line at the start of the reference's lines, after its code, that is a
    call. Nothing is written that the model did not write, and each part still has to pass
    the same checks."""
    sections = dict(sections)
    if not sections.get("Reference", "").strip() and "Description" in sections:
        lines = sections["Description"].split("\n")
        start = next((i for i, line in enumerate(lines) if _CODE_START.match(line)), None)
        if start:  # not 0: the description is the text before the code
            sections["Description"] = "\n".join(lines[:start])
            sections["Reference"] = "\n".join(lines[start:])
    if not sections.get("Inputs", "").strip() and sections.get("Reference", "").strip():
        lines = sections["Reference"].split("\n")
        code = next((i for i, line in enumerate(lines) if _CODE_START.match(line)), len(lines))
        start = next((i for i, line in enumerate(lines) if i > code and
                      _CALL_START.match(line)), None)
        if start is not None:
            sections["Reference"] = "\n".join(lines[:start])
            sections["Inputs"] = "\n".join(lines[start:])
    return sections


def _inputs(section: str, functions: dict[str, ast.FunctionDef]
            ) -> tuple[str, tuple[str, ...], tuple[tuple[Any, ...], ...]]:
    """The entry point and the calls of it distinct by input_key (the same input retyped is
    one), up to the first line that is not a call; a call with a number of arguments the
    function does not take is skipped, and so is a call of the function whose arguments are
    not literals (`f(xs)`, a broken string): a small model often writes one such line before
    good ones. Calls of a name the reference does not define are calls of its function when it
    defines only one (a small model often shortens or changes the name it just wrote: `max_of`
    for `max_of_duplicates`); the calls kept then name that function (written as call_text
    does), by either name."""
    entry_point, called, calls, inputs, wrong_arity, unreadable = None, None, [], [], 0, 0
    seen: set = set()  # input_key of each input kept
    lines, i = [line.strip() for line in section.split("\n")], 0
    while i < len(lines):
        line, parsed, i = _next_call(lines, i)
        names = set(functions) if called is None else {called, entry_point}
        if parsed is None and (match := _CALL_START.match(line)) and match[0][:-1] in names:
            unreadable += 1
            continue
        if parsed is None or (called is not None and parsed[0] not in names):
            break
        name, args, named = parsed
        if called is None:
            if name not in functions and len(functions) > 1:
                raise TaskFormatError("input_calls_unknown_function",
                                      f"{line[:80]!r} calls {name}, which the reference (of "
                                      f"{len(functions)} functions) does not define")
            called, entry_point = name, name if name in functions else next(iter(functions))
        function = functions[entry_point]
        args = _bind(function, args, named)
        if args is None or not _arity_fits(function, args):
            wrong_arity += 1
        elif input_key(args) not in seen:
            seen.add(input_key(args))
            calls.append(line if name == entry_point else call_text(entry_point, args))
            inputs.append(args)
        if len(inputs) == MAX_INPUTS:
            break
    if entry_point is None:
        raise TaskFormatError("no_inputs", f"the Inputs section has no call with literal "
                                           f"arguments ({unreadable} without)")
    if len(inputs) < MIN_INPUTS:
        reason = "input_arity" if wrong_arity else "too_few_inputs"
        raise TaskFormatError(reason, f"{len(inputs)} distinct input(s) {entry_point} takes "
                                      f"({wrong_arity} with the wrong number of arguments); "
                                      f"need {MIN_INPUTS}")
    return entry_point, tuple(calls), tuple(inputs)


def input_key(value: Any) -> Hashable:
    """What an input says, whatever the types it is written in: a list and a tuple of the same
    items, a bytes and the str of the same characters, and (as Python compares them) 1, 1.0
    and True have one key. An input another one retyped is a different call of a program, but
    not a different example of its task: with `spread([3, 9, 4])` shown and `spread((3, 9,
    4))` hidden, a table of the shown examples keyed by `tuple(xs)` passed every example of an
    admitted task (red-team pass 10). Sets and dicts keep keys of their own: their
    content is not a sequence's (no order, no repeats)."""
    kind = type(value)
    if kind in (list, tuple):
        return ("seq", tuple(input_key(x) for x in value))
    if kind is bytes:
        return value.decode("latin-1")  # one character per byte, as b'ab' reads 'ab'
    if kind is set:
        return ("set", frozenset(input_key(x) for x in value))
    if kind is dict:
        return ("dict", frozenset((input_key(k), input_key(v)) for k, v in value.items()))
    return value


_Call = tuple[str, tuple[Any, ...], dict[str, Any]]


def _next_call(lines: list[str], i: int) -> tuple[str, _Call | None, int]:
    """The call starting at lines[i] (it may run over up to MAX_CALL_LINES lines), its parse,
    and the index after it; (lines[i], None, i + 1) when no call starts there."""
    text = lines[i]
    for end in range(i + 1, min(i + MAX_CALL_LINES, len(lines)) + 1):
        text = " ".join(lines[i:end])
        parsed = _call(text)
        if parsed is not None or not _CALL_START.match(lines[i]) or \
                len(text) > MAX_LITERAL_CHARS:
            return text, parsed, end
    return text, None, i + 1


def _call(line: str) -> _Call | None:
    """(function name, literal arguments, literal keyword arguments) of a call like
    `f(1, [2], k=3)`, else None."""
    if not line or len(line) > MAX_LITERAL_CHARS:
        return None
    try:
        node = ast.parse(line, mode="eval").body
        if (not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name)
                or any(k.arg is None for k in node.keywords)
                or any(isinstance(a, ast.Starred) for a in node.args)):
            return None
        args = tuple(ast.literal_eval(a) for a in node.args)
        named = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        return None
    return node.func.id, args, named


def _bind(node: ast.FunctionDef, args: tuple[Any, ...], named: dict[str, Any]
          ) -> tuple[Any, ...] | None:
    """The positional arguments of a call whose named arguments fill the parameters after its
    positional ones, in order; None when they cannot (an unknown or repeated name, a gap)."""
    positional_only = len(node.args.posonlyargs)
    bound = list(args)
    for name in [a.arg for a in node.args.posonlyargs + node.args.args][len(args):]:
        if name not in named or len(bound) < positional_only:
            break
        bound.append(named[name])
    return tuple(bound) if len(bound) - len(args) == len(named) else None


def _arity_fits(node: ast.FunctionDef, args: tuple[Any, ...]) -> bool:
    a = node.args
    positional = len(a.posonlyargs) + len(a.args)
    required = positional - len(a.defaults)
    return required <= len(args) and (len(args) <= positional or a.vararg is not None)
