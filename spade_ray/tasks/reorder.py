"""A reference rewritten to read every set in the reverse of Python's order (driver.py).

The driver's raised interpreter answers each input once more with the reference's syntax tree
passed through Reorder, and an answer that changes was decided by the order Python iterates a
set in, which a description cannot state. Two layers, because neither alone sees every read:

- Every set the reference makes (a literal, a comprehension, `set(...)`, `frozenset(...)`) is
  made a ReversedSet or ReversedFrozenset: equal to the set, a set to isinstance, but iterated
  backwards wherever Python iterates it, in C too (`bytes(s)`, `out += s`, `out[:] = s`,
  `zip(*[s])`, `"%s" % s`, `s.__iter__()`), and `|`, `&`, `-`, `^`, union, ..., copy and pop
  keep to it.
- So is every set in the input. Any other set (one `set.union(a, b)` or a dict view's `&`
  returns) is turned backwards where the reference reads it in order: a loop, a
  comprehension, an unpacking, a starred argument, an f-string, `pop()`, an argument of a call
  that reads its items in order (ORDERING_CALLS), a `%` format's operand.

This module's whole text runs inside the sandbox, spliced into the driver's program (driver.py
reads it with inspect.getsource): it imports `ast` only, and is here, not in that program's
text, so that the host's tests can call it too.
"""

import ast

ORDERING_CALLS = {"list", "tuple", "enumerate", "zip", "map", "filter", "iter", "next", "min",
                  "max", "sum", "sorted", "dict", "join", "fromkeys", "extend", "chain",
                  "islice", "permutations", "combinations", "combinations_with_replacement",
                  "product", "accumulate", "Counter", "deque", "OrderedDict", "reduce",
                  "starmap", "zip_longest", "cycle", "groupby", "compress", "takewhile",
                  "dropwhile", "pairwise", "fsum", "prod", "mode", "multimode", "str", "repr",
                  "format", "bytes", "bytearray", "array"}
MAKERS = {"set", "frozenset"}


class ReversedSet(set):
    def __iter__(self):
        return iter(list(set.__iter__(self))[::-1])

    def __repr__(self):  # a set's text, its items in this order
        return "{" + ", ".join(map(repr, self)) + "}" if self else "set()"

    def pop(self):
        if len(self) < 2:
            return set.pop(self)
        item = next(iter(self))
        self.discard(item)
        return item


class ReversedFrozenset(frozenset):
    def __iter__(self):
        return iter(list(frozenset.__iter__(self))[::-1])

    def __repr__(self):
        return "frozenset({" + ", ".join(map(repr, self)) + "})" if self else "frozenset()"


def _keeping(kind, operation):
    def kept(self, *args):
        result = operation(self, *args)
        return kind(result) if type(result) in (set, frozenset) else result
    return kept


for _kind, _base in ((ReversedSet, set), (ReversedFrozenset, frozenset)):
    for _name in ("__or__", "__ror__", "__and__", "__rand__", "__sub__", "__rsub__", "__xor__",
                  "__rxor__", "union", "intersection", "difference", "symmetric_difference",
                  "copy"):
        setattr(_kind, _name, _keeping(_kind, getattr(_base, _name)))


class Reorder(ast.NodeTransformer):
    """Wraps every set the reference makes, and every place it reads one in order, in
    `_spade_reordered(...)`; `s.pop()` becomes `_spade_pop(s)`."""

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

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Mod):  # "%s" % s (an int's modulus is left as it is)
            if isinstance(node.right, ast.Tuple):
                node.right.elts = [e if isinstance(e, ast.Starred) else self.wrap(e)
                                   for e in node.right.elts]
            else:
                node.right = self.wrap(node.right)
        return node

    def visit_Assign(self, node):
        self.generic_visit(node)
        if any(isinstance(t, (ast.Tuple, ast.List)) for t in node.targets):
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
        if name in MAKERS and isinstance(f, ast.Name):
            return self.wrap(node)
        return node


def reordered(value):
    """A set iterated backwards (a copy of a set the rewrite did not make, which an iteration
    site may take: it only reads it); anything else as it is."""
    kind = type(value)
    if kind is set:
        return ReversedSet(value)
    if kind is frozenset:
        return ReversedFrozenset(value)
    return value


def turned(value):
    """An input with every set in it iterating backwards (a copy: an input is made fresh for
    the call)."""
    kind = type(value)
    if kind in (set, frozenset):
        return reordered(kind(map(turned, value)))
    if kind in (list, tuple):
        return kind(map(turned, value))
    if kind is dict:
        return {turned(k): turned(v) for k, v in value.items()}
    return value


def pop_reordered(value):
    """`value.pop()`, but a set gives up the item it would iterate last."""
    if type(value) is not set or len(value) < 2:
        return value.pop()
    item = list(value)[-1]
    value.discard(item)
    return item


def reordered_code(source: str, filename: str):
    """`source` compiled with every set read in reverse; run it with `names()` in its
    namespace."""
    return compile(ast.fix_missing_locations(Reorder().visit(ast.parse(source))), filename,
                   "exec")


def names() -> dict:
    """The names reordered code calls."""
    return {"_spade_reordered": reordered, "_spade_pop": pop_reordered}
