"""Test code whose asserts record instead of raising (standard library only; grader.py's).

A check that stopped at its first failed assert, or whose message called the candidate again
only on failure (HumanEval's `"First test error: " + str(candidate(1))`), told the candidate by
the calls it got which answer was wrong; a store that outlives the run (the host's page or
dentry cache, which no jail can reset) carried that to its next run, until a program holding
no answers passed HumanEval's check (red-team pass 13: Q2 after 51-65 runs, F1 after 8). So
`rewrite` turns each `assert test, msg` into a call of the `Recorder`, which evaluates both and
records the result, and the test goes on: the calls the candidate sees are the same whether its
answers were right or wrong. grader.py decides each outcome from the records afterwards, as
the first failed assert would have (`grader._verdict`).
"""

import ast

RECORD = "__spade_assert__"  # the recorder's name in the tests' namespace
NO_MESSAGE = object()


class Recorder:
    """Called by every rewritten `assert test, message` as RECORD(lambda: test, lambda: message):
    evaluates both, always (the message too: HumanEval's call the candidate again, e.g. "First
    test error: " + str(candidate(1)), so a message evaluated only on failure was a call that
    came only after a wrong answer), and records (held, its exception, message, its exception),
    the same work whether the assert held or not. Nothing is decided before the last call."""

    __slots__ = ("records", "recorded")

    def __init__(self, recorded):
        self.records = []
        # what an assert's test or message may raise and still be recorded (the candidate
        # raised it, or the test failed on its answer); anything else stops the test
        self.recorded = recorded

    def __call__(self, test, message=NO_MESSAGE):
        try:
            held, error = not not test(), None
        except self.recorded as e:
            held, error = None, e
        text, text_error = message, None
        if message is not NO_MESSAGE:
            try:
                text = message()
            except self.recorded as e:
                text, text_error = None, e
        self.records.append((held, error, text, text_error))


STATEMENT_LISTS = ("body", "orelse", "handlers", "finalbody", "cases")
UNSAFE_IN_LAMBDA = (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)


def rewrite(source):
    """The test source compiled with every `assert test, msg` turned into
    `RECORD(lambda: test, lambda: msg)` (Recorder), except where that would change what honest
    test code does; those asserts raise as before, and stop the test at their failure:
    - inside the body of a `try` that has handlers, or of a `with` (their code may catch, or
      suppress, the AssertionError or the candidate's exception), nested functions included;
    - directly in a class body (a lambda there does not see the class's names);
    - where the test or message binds a name or yields (`:=`, yield, await: a lambda would
      confine or refuse them).
    Only statements are walked (an assert is one), not expressions: 0.4 ms less per HumanEval
    check than an ast.NodeTransformer (measured)."""
    if "assert" not in source:
        return compile(source, "<test>", "exec")
    tree = ast.parse(source, "<test>")
    _rewrite_body(tree.body, False, False, any(w in source for w in (":=", "yield", "await")))
    return compile(tree, "<test>", "exec")


def _rewrite_body(statements, guarded, in_class, maybe_unsafe):
    for i, node in enumerate(statements):
        if type(node) is ast.Assert:
            if not (guarded or in_class or maybe_unsafe and any(
                    isinstance(n, UNSAFE_IN_LAMBDA) for n in ast.walk(node))):
                statements[i] = _recording(node)
            continue
        kind = type(node)
        inner_class = (True if kind is ast.ClassDef else False
                       if kind in (ast.FunctionDef, ast.AsyncFunctionDef) else in_class)
        for field in STATEMENT_LISTS:
            inner = getattr(node, field, None)
            if not inner:
                continue
            if field in ("handlers", "cases"):  # ExceptHandler and match_case bodies
                for item in inner:
                    _rewrite_body(item.body, guarded, inner_class, maybe_unsafe)
            else:
                _rewrite_body(inner, guarded or field == "body" and (
                    kind in (ast.With, ast.AsyncWith) or bool(getattr(node, "handlers", None))),
                    inner_class, maybe_unsafe)


def _recording(node):
    """RECORD(lambda: test[, lambda: msg]) as a statement, at the assert's place."""
    where = {"lineno": node.lineno, "col_offset": node.col_offset,
             "end_lineno": node.end_lineno, "end_col_offset": node.end_col_offset}
    no_args = ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[],
                            kwarg=None, defaults=[])
    thunks = [ast.Lambda(args=no_args, body=part, **where)
              for part in ((node.test,) if node.msg is None else (node.test, node.msg))]
    call = ast.Call(func=ast.Name(id=RECORD, ctx=ast.Load(), **where), args=thunks, keywords=[],
                    **where)
    return ast.Expr(value=call, **where)
