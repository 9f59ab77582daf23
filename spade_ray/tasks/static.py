"""Admission's static rules: what a reference may not contain, decided from its text alone.

A task's expected outputs must follow from its inputs and nothing else: a reference that reads
the clock, the process or the file system gives answers the grader cannot reproduce, and one
that flips with the clock (`int(time.time() // 3) % 2`) agrees with itself for the second that
admission takes, then passes a solver half the time by luck, a pass rate the generator's reward
pays for. So a reference imports only ALLOWED_IMPORTS, calls nothing that does I/O or reads the
process, and reaches no other module through the allowed ones. The ways to reach one, each
closed here (red-team passes found each of them admitted):
- a module an allowed module imported for itself: `statistics.sys.modules['time']`, also under
  an underscore name (`collections._sys`) and as `from statistics import sys`;
- a lookup by string: `getattr(m, 'sys')`, `operator.attrgetter`, `operator.methodcaller`,
  `string.Formatter().get_field('0.sys', (statistics,), {})`, `functools.update_wrapper` and
  `wraps` (with `assigned=('_' + '_globals__',)`), `__builtins__`, any dunder name, attribute,
  definition or string, a format string built at run time (`s.format(f)` where s is not a
  literal), a match class pattern (`case object(__self__=b)`, or a class whose __match_args__
  were set at run time: only plain-data builtins may be matched, with allowed attribute names),
  and `type()` with more than one argument, which makes such classes;
- a name bound nowhere in the program (one a trick put in its globals) and a private name
  imported from an allowed module (`from typing import _eval_type`);
- a module as a value (`f(statistics)`, `x = statistics`, `'{0.sys}'.format(statistics)`): an
  imported module's name may only be followed by an attribute;
- a frame or code object, whose attributes are not dunders: a generator's
  `gi_frame.f_builtins['__import__']`;
- an evaluated annotation (typing.get_type_hints, ForwardRef, functools.singledispatch's
  register evaluate strings as code).
Runtime backs these up: the admission driver's clocks jump at every read (tasks/driver.py), so a
reference that reads the time some other way disagrees with itself and is nondeterministic.

Nor may it compare values by identity (`is`, `is not`, `operator.is_`) unless one side is one
of a kind (None, True, False, `...`, a type, a sentinel the module makes): CPython keeps one
object for each int from -5 to 256 and for some strings, so `xs[i] is xs[i + 1]` answered
"count adjacent equal values" right below 257 and wrong above, and an honest `==` solution
failed (red-team s33).

Nor may a reference name the errors of an interpreter's limits, or their parent classes
(LIMIT_ERRORS): a handler turns a limit into an answer the description cannot state (red-team
s31: -1 where recursion went past 10,000 frames, or `len(range(...))` past the index size,
failed honest solutions). The driver's raised interpreter catches the rest of that family (a
bare or `except Exception` handler): it drops an input while whose answer a limit error was
raised (tasks/driver.py).

The entry point's def line is also the end of the solver's prompt, so what it carries is given
away (`signature_reason`): a default may only be a short scalar (red-team pass 10 admitted
`def score(word, weights=lambda w: ...)`, which `return weights(word)` passed), an annotation
only a type (a string annotation is text the prompt shows).
"""

from __future__ import annotations

import ast
import collections
import functools
import importlib
import re
import types

from spade_ray.tasks.imports import ALLOWED_IMPORTS, bindings, free_names

# and the classes above them that a handler could name instead (RecursionError is a
# RuntimeError, OverflowError an ArithmeticError); `except Exception` and a bare `except` stay
# allowed (honest parsing code uses them), and only the driver's raised interpreter sees those
TYPE_NAMES = frozenset({"int", "float", "complex", "bool", "str", "bytes", "list", "tuple",
                        "dict", "set", "frozenset", "type", "object", "range"})
LIMIT_ERRORS = frozenset({"RecursionError", "OverflowError", "MemoryError", "RuntimeError",
                          "ArithmeticError"})
FORBIDDEN_NAMES = frozenset({
    "open", "input", "print", "eval", "exec", "compile", "__import__", "globals", "locals",
    "vars", "breakpoint", "id", "hash", "exit", "quit", "help", "memoryview", "setattr",
    "delattr", "getattr", "attrgetter", "methodcaller", "Formatter", "get_field", "get_value",
    "get_type_hints", "ForwardRef", "singledispatch", "singledispatchmethod", "update_wrapper",
    "wraps"}) | LIMIT_ERRORS
IDENTITY_FUNCTIONS = frozenset({"is_", "is_not"})  # operator's `is` and `is not`
# the classes a match statement's class pattern may name: plain data, no __match_args__ to set
MATCHABLE = frozenset({"int", "float", "complex", "str", "bytes", "bytearray", "bool", "list",
                       "tuple", "dict", "set", "frozenset"})
NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})
INTROSPECTION_PREFIXES = ("gi_", "cr_", "ag_", "f_", "tb_", "co_")
# modules with process state, whatever the interpreter's allowed modules import
STATEFUL_MODULES = frozenset({"sys", "os", "time", "builtins", "importlib", "gc", "inspect"})
DUNDER = re.compile(r"__\w+__")


def static_reason(reference: str) -> str | None:
    """Why the reference cannot be a task without running it (`module_code`,
    `forbidden:<name>` or `unbound:<name>`), or None."""
    tree = ast.parse(reference)
    for node in tree.body:
        if not isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.Assign)) and \
                not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            return "module_code"
    type_of = {id(n.func) for n in ast.walk(tree)
               if isinstance(n, ast.Call) and len(n.args) == 1 and not n.keywords}
    for node in ast.walk(tree):
        reason = _forbidden(node)
        if reason is None and isinstance(node, ast.Name) and node.id == "type" and \
                id(node) not in type_of:
            reason = "type"  # type(name, bases, namespace) makes classes of run-time names
        if reason:
            return f"forbidden:{reason}"
    # a free name is a typo (a NameError when it runs) or a trick: only something like
    # functools.update_wrapper filling the program's globals would bind it
    free = free_names(tree)
    if free:
        return f"unbound:{free[0]}"
    if _writes_imported(tree):
        return "forbidden:module_write"
    if _identity_of_values(tree):
        return "forbidden:is"
    return "forbidden:module_value" if _modules_as_values(tree) else None


MAX_DEFAULT_CHARS = 20  # a string default longer than a word could hold a table of answers


def signature_reason(signature: str) -> str | None:
    """Why the entry point's def line (the end of the solver's prompt) gives something away:
    `signature:default` (a default other than a short scalar or `()`) or
    `signature:annotation` (an annotation other than a type), or None."""
    node = ast.parse(signature + "\n    pass\n").body[0]
    arguments = node.args
    defaults = arguments.defaults + [d for d in arguments.kw_defaults if d is not None]
    if not all(map(_scalar, defaults)):
        return "signature:default"
    annotations = [a.annotation for a in (arguments.posonlyargs + arguments.args
                                          + arguments.kwonlyargs + [arguments.vararg,
                                                                    arguments.kwarg])
                   if a is not None and a.annotation is not None] + [node.returns]
    if not all(_type(a) for a in annotations if a is not None):
        return "signature:annotation"
    return None


def _scalar(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    if isinstance(node, ast.Tuple):
        return not node.elts
    return isinstance(node, ast.Constant) and (
        not isinstance(node.value, (str, bytes)) or len(node.value) <= MAX_DEFAULT_CHARS)


def _type(node: ast.expr) -> bool:
    """A type expression: names, dotted names, subscripts, `|` unions, None and `...`."""
    todo = [node]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Subscript):
            todo += [node.value, node.slice]
        elif isinstance(node, (ast.Tuple, ast.List)):  # Callable[[int], str], dict[str, int]
            todo += node.elts
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            todo += [node.left, node.right]
        elif isinstance(node, ast.Attribute):
            todo.append(node.value)
        elif not (isinstance(node, ast.Name) or isinstance(node, ast.Constant)
                  and (node.value is None or node.value is Ellipsis)):
            return False
    return True


def _modules_as_values(tree: ast.Module) -> bool:
    """Whether a name an import binds to a module is used other than as `name.attribute`."""
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            try:  # an allowed module (static_reason checked): the standard library's
                parent = importlib.import_module(node.module)
            except ImportError:  # collections.nope: the reference fails when it runs
                continue
            modules |= {a.asname or a.name for a in node.names
                        if isinstance(getattr(parent, a.name, None), types.ModuleType)}
    bases = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    return any(isinstance(n, ast.Name) and n.id in modules and id(n) not in bases
               for n in ast.walk(tree))


def _writes_imported(tree: ast.Module) -> bool:
    """Whether the program assigns, augments or deletes an attribute or item of a name an
    import binds (`bisect.bisect_right = bisect.bisect_left`, `del math.isclose`,
    `Counter.most_common = ...`), or of a call's result (`type(c).most_common = ...`).
    Modules and their classes are shared by every program of one process: the twin run defines
    all known references in one, where such a line hid a copy of another known task or made
    every float agree (red-team s24 H2). A program's own containers (`_CACHE[k] = v`) pass."""
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.asname or a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                if a.name != "*":
                    imported.add(a.asname or a.name)
                elif node.module:  # an allowed module (static_reason checked it)
                    try:
                        imported |= {n for n in vars(importlib.import_module(node.module))
                                     if not n.startswith("_")}
                    except ImportError:
                        pass
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Subscript)) and \
                isinstance(node.ctx, (ast.Store, ast.Del)):
            root = node.value
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            if isinstance(root, ast.Call) or isinstance(root, ast.Name) and root.id in imported:
                return True
    return False


def _forbidden(node: ast.AST) -> str | None:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        modules = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or "."]
        for module in modules:
            if module.split(".")[0] not in ALLOWED_IMPORTS:
                return module.split(".")[0] or "relative_import"
        if isinstance(node, ast.ImportFrom):  # `from typing import _eval_type`
            return next((a.name for a in node.names if _forbidden_attribute(a.name)), None)
    if isinstance(node, ast.Name) and _forbidden_name(node.id):
        return node.id
    if isinstance(node, ast.Attribute) and _forbidden_attribute(node.attr):
        return node.attr
    if isinstance(node, ast.Attribute) and node.attr in ("format", "format_map") and \
            not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
        return node.attr  # a format string built at run time looks attributes up by name
    if isinstance(node, ast.MatchClass):  # `case object(__self__=x)` is a lookup by name
        if not (isinstance(node.cls, ast.Name) and node.cls.id in MATCHABLE):
            return "match_class"
        return next((a for a in node.kwd_attrs if _forbidden_attribute(a)), None)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and \
            node.name.startswith("__"):
        return node.name  # a dunder method: __instancecheck__, __eq__, __getattr__ ...
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return "global"

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        found = DUNDER.search(node.value)
        return found[0] if found else None
    return None


def _identity_of_values(tree: ast.Module) -> bool:
    """Whether the program compares by identity (`is`, `is not`) where neither side is one of
    a kind: None, True, False, ..., a type (`type(x) is int`) or a sentinel, a name the module
    binds to a new `object()` and nowhere else (not `BIG = 300` or `BIG = int('300')`, which
    `is` would tell from an equal int made at run time, nor a function's own `MISSING =
    xs[i]` under a module's `MISSING = object()`, nor `bytes` as a loop's name: red-team
    s34); or names operator's `is_` or `is_not`, which compare so wherever they are called
    (`map(operator.is_, xs, xs[1:])`, s34)."""
    if any(isinstance(n, ast.Attribute) and n.attr in IDENTITY_FUNCTIONS or
           isinstance(n, ast.Name) and n.id in IDENTITY_FUNCTIONS or
           isinstance(n, ast.alias) and n.name in IDENTITY_FUNCTIONS for n in ast.walk(tree)):
        return True  # `from operator import *` binds is_ too (s34)
    once = collections.Counter(bindings(tree))
    bound = {t.id for n in tree.body if isinstance(n, ast.Assign) and _new_object(n.value)
             for t in n.targets if isinstance(t, ast.Name) and once[t.id] == 1} | \
        (TYPE_NAMES - once.keys())  # a type's name the program binds to a value is a value
    return any(isinstance(op, (ast.Is, ast.IsNot)) and not (_one_of_a_kind(left, bound)
                                                            or _one_of_a_kind(right, bound))
               for node in ast.walk(tree) if isinstance(node, ast.Compare)
               for op, left, right in zip(node.ops, [node.left, *node.comparators],
                                          node.comparators))


def _new_object(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
        node.func.id == "object" and not node.args and not node.keywords


def _one_of_a_kind(node: ast.expr, bound: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return any(node.value is v for v in (None, True, False, Ellipsis))
    if isinstance(node, ast.Name):
        return node.id in bound
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
        node.func.id == "type" and len(node.args) == 1


def _forbidden_name(name: str) -> bool:
    return name in FORBIDDEN_NAMES or name.startswith("__")


def _forbidden_attribute(attr: str) -> bool:
    return (attr.startswith("_") and attr not in NAMEDTUPLE_API) or \
        attr.startswith(INTROSPECTION_PREFIXES) or attr in _module_attributes() or \
        attr in FORBIDDEN_NAMES


@functools.cache
def _module_attributes() -> frozenset[str]:
    """The names under which the allowed modules, or modules reachable from them through
    allowed ones, hold a module outside ALLOWED_IMPORTS (statistics.sys, statistics.random,
    re.enum, typing.types ...), with STATEFUL_MODULES: read from this interpreter, the same
    Python minor version as the sandbox's."""
    names, seen = set(STATEFUL_MODULES), set()
    todo = [importlib.import_module(m) for m in sorted(ALLOWED_IMPORTS)]
    while todo:
        module = todo.pop()
        if module.__name__ in seen:
            continue
        seen.add(module.__name__)
        for name, value in vars(module).items():
            if not isinstance(value, types.ModuleType):
                continue
            if value.__name__.split(".")[0] in ALLOWED_IMPORTS:
                todo.append(value)
            else:
                names.add(name)
    return frozenset(names)
