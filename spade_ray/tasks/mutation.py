"""Mutants of a reference program: one small AST change each, the bugs a programmer makes.

Two uses. Mutation adequacy: a task's examples must tell the reference from most of its mutants
(an example set that no off-by-one or flipped comparison changes grades nothing). Repair tasks:
a mutant that the examples catch is the buggy program the solver fixes, so the generator never
has to write a bug. The operators are the classic ones of mutation testing (Offutt et al.,
"An experimental determination of sufficient mutant operators", 1996): relational, arithmetic,
logical and unary operator replacement, constant off-by-one, and swapping min/max, any/all,
True/False. Equivalent mutants exist (e.g. `<` vs `<=` on values that never tie), which is why
adequacy is a fraction, not "all killed". Hand-written: mutmut and cosmic-ray mutate files on
disk and run a test command per mutant; we need mutant sources in memory to run in the sandbox.
"""

from __future__ import annotations

import ast
import copy
import random

_COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
            ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
            ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_BINARY = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mult,
           ast.Div: ast.Mult, ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult}
_BOOL = {ast.And: ast.Or, ast.Or: ast.And}
_NAMES = {"min": "max", "max": "min", "any": "all", "all": "any"}


class _Mutator(ast.NodeTransformer):
    """Counts mutation sites in a fixed walk order; applies the one numbered `target`."""

    def __init__(self, target: int = -1) -> None:
        self.target, self.sites = target, 0

    def visit(self, node: ast.AST) -> ast.AST:
        # A condition or a sum of literals alone (`if not (2 < 3 and 6 // 2 == 3): raise`) is
        # the same for every input: no site in it is a bug the examples could be good at
        # catching, and its mutants (raising on every input) would only pad the score.
        literal = isinstance(node, (ast.Compare, ast.BoolOp, ast.BinOp)) or \
            (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not))
        if literal and not any(isinstance(n, ast.Name) for n in ast.walk(node)):
            return node
        return super().visit(node)

    def _site(self) -> bool:
        hit = self.sites == self.target
        self.sites += 1
        return hit

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        for i, op in enumerate(node.ops):
            if type(op) in _COMPARE and self._site():
                node.ops[i] = _COMPARE[type(op)]()
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if type(node.op) in _BINARY and self._site():
            node.op = _BINARY[type(node.op)]()
        return node

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        self.generic_visit(node)
        if type(node.op) in _BINARY and self._site():
            node.op = _BINARY[type(node.op)]()
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        if self._site():
            node.op = _BOOL[type(node.op)]()
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, (ast.Not, ast.USub)) and self._site():
            return node.operand
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        value = node.value
        if isinstance(value, bool):
            if self._site():
                return ast.copy_location(ast.Constant(not value), node)
        elif isinstance(value, int):
            if self._site():
                return ast.copy_location(ast.Constant(value + 1), node)
            if value != 0 and self._site():
                return ast.copy_location(ast.Constant(value - 1), node)
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in _NAMES and isinstance(node.ctx, ast.Load) and self._site():
            return ast.copy_location(ast.Name(_NAMES[node.id], ast.Load()), node)
        return node


def mutants(source: str, limit: int, seed: int = 0) -> list[str]:
    """Up to `limit` distinct mutants of `source` (each differs from it by one operator), a
    seeded sample when there are more; [] when the source does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    counter = _Mutator()
    counter.visit(copy.deepcopy(tree))
    original = ast.unparse(tree)
    out: dict[str, None] = {}
    for site in random.Random(seed).sample(range(counter.sites), counter.sites):
        mutated = ast.fix_missing_locations(_Mutator(site).visit(copy.deepcopy(tree)))
        try:
            text = ast.unparse(mutated)
        except (ValueError, RecursionError):  # a mutated constant Python cannot write back
            continue
        if text != original:
            out.setdefault(text + "\n")
        if len(out) == limit:
            break
    return list(out)
