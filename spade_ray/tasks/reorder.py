"""A reference rewritten to read every set in the reverse of Python's order (driver.py).

The driver's raised interpreter answers each input once more with the reference's syntax tree
passed through Reorder: wherever the program takes a set's items in order, it gets them
reversed. An answer that changes was decided by the order Python iterates the set in, which a
description cannot state. This module's whole text runs inside the sandbox, spliced into the
driver's program (driver.py reads it with inspect.getsource): it imports `ast` only, and is
here, not in that program's text, so that the host's tests can call it too.
"""

import ast

ORDERING_CALLS = {"list", "tuple", "enumerate", "zip", "map", "filter", "iter", "next", "min",
                  "max", "sum", "sorted", "dict", "join", "fromkeys", "extend", "chain",
                  "islice", "permutations", "combinations", "combinations_with_replacement",
                  "product", "accumulate", "Counter", "deque", "OrderedDict", "reduce",
                  "starmap", "zip_longest", "cycle", "groupby", "compress", "takewhile",
                  "dropwhile", "pairwise", "fsum", "prod", "mode", "multimode", "str", "repr",
                  "format"}


class Reorder(ast.NodeTransformer):
    """Every place the reference takes a set's items in its order: a loop, a comprehension,
    an unpacking, a call of a function that reads its argument's items in order, pop()."""

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
        return node


def reordered(value):
    """A set's items in the reverse of the order Python iterates them in; anything else as is."""
    return list(value)[::-1] if isinstance(value, (set, frozenset)) and len(value) > 1 \
        else value


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
