"""A reference rewritten to read every set in another order than Python's (driver.py).

The driver's raised interpreter answers each input again with the reference's syntax tree
passed through Reorder, once per order in ORDERS, and an input whose answer changes was decided
by the order Python iterates a set in, which a description cannot state. Two orders, because
neither alone changes every such answer: the reverse moves every item (so the first, the last
and any one position change), and a shuffle keyed by a salt this process draws at start changes
what the reverse keeps (a path's length through the items, the first plus the last).

Every set the reference gets iterates in the order: its `set` and `frozenset` are TurnedSet
and TurnedFrozenset (names(); to isinstance still set and frozenset), a set literal or
comprehension is made one, so is every set in its input (`turned`), and set operations, copy
and pop keep to it. Python iterates them in that order wherever it iterates them, in C too
(`bytes(s)`, `out += s`, `"%s" % s`, `map(set, ...)`). A set that C code makes on its own is
turned where it comes out: the result of a set operator (a dict view's `&`) and of every call
(`operator.and_`, `reduce(operator.or_, views)`); red-team s34 read such sets through
`heapq.nsmallest`, `heapq.merge` and `itertools.tee`, consumers no list of readers named. And
where the reference reads an iterable in order: a loop, a comprehension, an unpacking, a slice
or augmented assignment, a starred argument, an f-string, `pop()`, an argument of a call that
reads its items in order (ORDERING_CALLS), a `%` format's operand.

The answers are compared as the grader compares them (`same_answer`: exact types, 2 is not
2.0; a dict's order is no answer).

This module's whole text runs inside the sandbox, spliced into the driver's program (driver.py
reads it with inspect.getsource): it imports `ast`, `operator` and `os` only, and is here, not
in that program's text, so that the host's tests can call it too.
"""

import ast
import operator
import os

ORDERING_CALLS = {"list", "tuple", "enumerate", "zip", "map", "filter", "iter", "next", "min",
                  "max", "sum", "sorted", "dict", "join", "fromkeys", "extend", "chain",
                  "islice", "permutations", "combinations", "combinations_with_replacement",
                  "product", "accumulate", "Counter", "deque", "OrderedDict", "reduce",
                  "starmap", "zip_longest", "cycle", "groupby", "compress", "takewhile",
                  "dropwhile", "pairwise", "fsum", "prod", "mode", "multimode", "str", "repr",
                  "format", "bytes", "bytearray", "array", "update", "extendleft",
                  "from_iterable"}
# Set operators: a dict view's (or an items view's) result is a plain set, made by C
SET_OPERATORS = (ast.BitAnd, ast.BitOr, ast.BitXor, ast.Sub)
SALT = int.from_bytes(os.urandom(8), "big")


def backwards(items):
    return items[::-1]


def shuffled(items):
    """The items sorted by a salted mix of their hashes (the same set, the same order); turned
    by one place where that is Python's own order or its reverse, which `backwards` tries."""
    order = sorted(items, key=lambda item: hash((SALT, hash(item))))
    if all(map(operator.is_, order, items)) or all(map(operator.is_, order, items[::-1])):
        return items[1:] + items[:1]
    return order


ORDERS = (backwards, shuffled)
order = [backwards]  # the one in use


class _Standing(type):
    """A class standing in for a builtin: isinstance and issubclass answer for the builtin, so
    that to the reference a set it did not make is still a `set`."""

    def __instancecheck__(cls, value):
        return isinstance(value, cls.__mro__[1])

    def __subclasscheck__(cls, kind):
        return issubclass(kind, cls.__mro__[1])


class TurnedSet(set, metaclass=_Standing):
    def __iter__(self):
        items = list(set.__iter__(self))
        return iter(order[0](items) if len(items) > 1 else items)

    def __repr__(self):  # a set's text, its items in this order
        return "{" + ", ".join(map(repr, self)) + "}" if self else "set()"

    def pop(self):
        if len(self) < 2:
            return set.pop(self)
        item = next(iter(self))
        self.discard(item)
        return item


class TurnedFrozenset(frozenset, metaclass=_Standing):
    def __iter__(self):
        items = list(frozenset.__iter__(self))
        return iter(order[0](items) if len(items) > 1 else items)

    def __repr__(self):
        return "frozenset({" + ", ".join(map(repr, self)) + "})" if self else "frozenset()"


def _keeping(kind, operation):
    def kept(self, *args):
        result = operation(self, *args)
        return kind(result) if type(result) in (set, frozenset) else result
    return kept


for _kind, _base in ((TurnedSet, set), (TurnedFrozenset, frozenset)):
    for _name in ("__or__", "__ror__", "__and__", "__rand__", "__sub__", "__rsub__", "__xor__",
                  "__rxor__", "union", "intersection", "difference", "symmetric_difference",
                  "copy"):
        setattr(_kind, _name, _keeping(_kind, getattr(_base, _name)))
STANDS_FOR = {TurnedSet: set, TurnedFrozenset: frozenset}
PLAIN = {type(None), bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset}


class Reorder(ast.NodeTransformer):
    """Wraps every set literal and comprehension, every set operator's and every call's result,
    and every place the reference reads an iterable in order, in `_spade_reordered(...)`;
    `s.pop()` becomes `_spade_pop(s)`."""

    def wrap(self, node):
        return ast.Call(ast.Name("_spade_reordered", ast.Load()), [node], [])

    def visit_For(self, node):
        self.generic_visit(node)
        node.iter = self.wrap(node.iter)
        return node

    visit_AsyncFor = visit_For

    def visit_comprehension(self, node):
        self.generic_visit(node)
        node.iter = self.wrap(node.iter)
        return node

    def visit_Set(self, node):
        self.generic_visit(node)
        return self.wrap(node)

    visit_SetComp = visit_Set

    def visit_Starred(self, node):
        self.generic_visit(node)
        if isinstance(node.ctx, ast.Load):  # `*s` read, not `first, *rest = ...` written
            node.value = self.wrap(node.value)
        return node

    def visit_YieldFrom(self, node):
        self.generic_visit(node)
        node.value = self.wrap(node.value)
        return node

    visit_FormattedValue = visit_YieldFrom  # f"{s}": a set's text shows its order
    visit_AugAssign = visit_YieldFrom  # out += s

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Mod):  # "%s" % s (an int's modulus is left as it is)
            if isinstance(node.right, ast.Tuple):
                node.right.elts = [e if isinstance(e, ast.Starred) else self.wrap(e)
                                   for e in node.right.elts]
            else:
                node.right = self.wrap(node.right)
        elif isinstance(node.op, SET_OPERATORS):  # `d.keys() & e.keys()`: a set C made
            return self.wrap(node)
        return node

    def visit_Assign(self, node):
        self.generic_visit(node)
        if any(isinstance(t, (ast.Tuple, ast.List)) or isinstance(t, ast.Subscript)
               and isinstance(t.slice, ast.Slice) for t in node.targets):  # a, b = s; x[:] = s
            node.value = self.wrap(node.value)
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)
        if name == "pop" and isinstance(f, ast.Attribute) and not node.args \
                and not node.keywords:
            return ast.Call(ast.Name("_spade_pop", ast.Load()), [f.value], [])
        if name in ORDERING_CALLS:
            node.args = [a if isinstance(a, ast.Starred) else self.wrap(a) for a in node.args]
        return self.wrap(node)  # its result: a set C made (`operator.and_`, `reduce`)


def reordered(value):
    """A set as a Turned one (a copy of one the rewrite did not make, which an iteration site
    may take: it only reads it); anything else as it is."""
    kind = type(value)
    if kind is set:
        return TurnedSet(value)
    if kind is frozenset:
        return TurnedFrozenset(value)
    return value


def turned(value):
    """An input with every set in it a Turned one (a copy: an input is made fresh for the
    call)."""
    kind = type(value)
    if kind in (set, frozenset):
        return reordered(kind(map(turned, value)))
    if kind in (list, tuple):
        return kind(map(turned, value))
    if kind is dict:
        return {turned(k): turned(v) for k, v in value.items()}
    return value


def pop_reordered(value):
    """`value.pop()`, a set giving up the item it iterates first in the order in use."""
    if type(value) is not set or len(value) < 2:
        return value.pop()
    item = order[0](list(value))[0]
    value.discard(item)
    return item


def same_answer(a, b):
    """Whether two answers are the same as the grader compares them: exact types (2 is not 2.0
    nor True), a Turned set as the set it stands for, dicts and sets by their items whatever
    their order, NaN equal to NaN. An answer that is not plain data is no example (admission
    drops it, or the grader's check of the reference fails it): no order decides it here."""
    kind, other = STANDS_FOR.get(type(a), type(a)), STANDS_FOR.get(type(b), type(b))
    if kind not in PLAIN or other not in PLAIN:
        return True  # no example: the reference's own class (made anew by each run) or such
    if kind is not other:
        return False
    if kind in (list, tuple):
        return len(a) == len(b) and all(map(same_answer, a, b))
    if kind in (set, frozenset, dict):
        if len(a) != len(b) or (a.keys() if kind is dict else a) != (b.keys() if kind is dict
                                                                      else b):
            return False
        theirs = {key: key for key in b}  # b's own key for each of a's: typed too
        return all(same_answer(key, theirs[key]) and (kind is not dict
                                                      or same_answer(a[key], b[key]))
                   for key in a)
    return a == b or repr(a) == repr(b)


def reordered_code(source: str, filename: str):
    """`source` compiled to read every set in the order in use; run it with `names()` as its
    namespace's start."""
    return compile(ast.fix_missing_locations(Reorder().visit(ast.parse(source))), filename,
                   "exec")


def names() -> dict:
    """The names reordered code calls, and its `set` and `frozenset`."""
    return {"_spade_reordered": reordered, "_spade_pop": pop_reordered, "set": TurnedSet,
            "frozenset": TurnedFrozenset}
