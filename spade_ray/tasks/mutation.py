"""Mutants of a reference program: one small AST change each, the bugs a programmer makes.

Two uses. Mutation adequacy: a task's examples must tell the reference from most of its mutants
(an example set that no off-by-one or flipped comparison changes grades nothing). Repair tasks:
a mutant that the examples catch is the buggy program the solver fixes, so the generator never
has to write a bug. The operators are the classic ones of mutation testing (Offutt et al., "An
experimental determination of sufficient mutant operators", 1996): relational, arithmetic,
logical and unary operator replacement, constant off-by-one, a changed string constant, and
swapping min/max, any/all, True/False, a str method for its twin (upper/lower ...) and one of
operator's functions for another (operator.add/sub ...). Equivalent mutants exist (e.g. `<` vs
`<=` on values that never tie), which is why adequacy is a fraction, not "all killed".
Hand-written: mutmut and cosmic-ray mutate files on disk and run a test command per mutant; we
need mutant sources in memory to run in the sandbox.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import random

_COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
            ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
            ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_BINARY = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mult,
           ast.Div: ast.Mult, ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult}
_BOOL = {ast.And: ast.Or, ast.Or: ast.And}
_NAMES = {"min": "max", "max": "min", "any": "all", "all": "any"}
# methods of str (and operator's functions) swapped for their twin: a reference written with
# them had no mutation site, and its examples were never tested (a fourth red-team pass)
_METHODS = {"upper": "lower", "lower": "upper", "startswith": "endswith",
            "endswith": "startswith", "lstrip": "rstrip", "rstrip": "lstrip", "find": "rfind",
            "rfind": "find", "index": "rindex", "rindex": "index", "isupper": "islower",
            "islower": "isupper", "isdigit": "isalpha", "isalpha": "isdigit"}
_OPERATOR = {"add": "sub", "sub": "add", "mul": "add", "floordiv": "mul", "truediv": "mul",
             "mod": "floordiv", "pow": "mul", "lt": "le", "le": "lt", "gt": "ge", "ge": "gt",
             "eq": "ne", "ne": "eq", "and_": "or_", "or_": "and_", "contains": "is_not"}


class _Mutator(ast.NodeTransformer):
    """Counts mutation sites in a fixed walk order; applies the one numbered `target`."""

    def __init__(self, target: int = -1, from_operator: frozenset[str] = frozenset()) -> None:
        self.target, self.sites, self.from_operator = target, 0, from_operator
        self.statements: list[ast.stmt] = []
        self.hit: ast.stmt | None = None  # the statement the applied mutation is in

    def visit(self, node: ast.AST) -> ast.AST:
        # A condition or a sum of literals alone (`if not (2 < 3 and 6 // 2 == 3): raise`) is
        # the same for every input: no site in it is a bug the examples could be good at
        # catching, and its mutants (raising on every input) would only pad the score.
        literal = isinstance(node, (ast.Compare, ast.BoolOp, ast.BinOp)) or \
            (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not))
        if literal and not any(isinstance(n, ast.Name) for n in ast.walk(node)):
            return node
        if not isinstance(node, ast.stmt):
            return super().visit(node)
        self.statements.append(node)
        try:
            return super().visit(node)
        finally:
            self.statements.pop()

    def _site(self) -> bool:
        hit = self.sites == self.target
        self.sites += 1
        if hit and self.statements:
            self.hit = self.statements[-1]
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

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        if isinstance(node.value, ast.Constant):  # a docstring: no behaviour to change
            return node
        return self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        table = _OPERATOR if isinstance(node.value, ast.Name) and node.value.id == "operator" \
            else _METHODS
        if node.attr in table and self._site():
            node.attr = table[node.attr]
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        value = node.value
        if isinstance(value, str):
            if self._site():
                return ast.copy_location(ast.Constant(value + "X"), node)
        elif isinstance(value, bool):
            if self._site():
                return ast.copy_location(ast.Constant(not value), node)
        elif isinstance(value, int):
            if self._site():
                return ast.copy_location(ast.Constant(value + 1), node)
            if value != 0 and self._site():
                return ast.copy_location(ast.Constant(value - 1), node)
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if not isinstance(node.ctx, ast.Load):
            return node
        if node.id in _NAMES and self._site():
            return ast.copy_location(ast.Name(_NAMES[node.id], ast.Load()), node)
        if node.id in self.from_operator and node.id in _OPERATOR and self._site():
            # `from operator import add`: the twin may not be imported, so it is fetched
            twin = ast.parse(f"__import__('operator').{_OPERATOR[node.id]}", mode="eval")
            return ast.copy_location(twin.body, node)
        return node


@dataclasses.dataclass(frozen=True)
class Mutant:
    code: str
    # the mutation is in a statement that no input reaches through data (`base = k * m - 2`
    # with k and m constants): a mutant that then fails every example was failed by the
    # program's constants, not caught by its examples (adequacy.counted)
    fixed: bool


def mutants(source: str, limit: int, seed: int = 0) -> list[Mutant]:
    """Up to `limit` distinct mutants of `source` (each differs from it by one operator), a
    seeded sample when there are more; [] when the source does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    from_operator = frozenset(a.asname or a.name for n in ast.walk(tree)
                              if isinstance(n, ast.ImportFrom) and n.module == "operator"
                              for a in n.names)
    counter = _Mutator(from_operator=from_operator)
    counter.visit(copy.deepcopy(tree))
    original = ast.unparse(tree)
    inputs = _input_names(tree)
    out: dict[str, bool] = {}
    for site in random.Random(seed).sample(range(counter.sites), counter.sites):
        mutator = _Mutator(site, from_operator)
        mutated = ast.fix_missing_locations(mutator.visit(copy.deepcopy(tree)))
        try:
            text = ast.unparse(mutated)
        except (ValueError, RecursionError):  # a mutated constant Python cannot write back
            continue
        if text != original:
            out.setdefault(text + "\n", not (_names(mutator.hit) & inputs))
        if len(out) == limit:
            break
    return [Mutant(code, fixed) for code, fixed in out.items()]


def _names(statement: ast.stmt | None) -> set[str]:
    """The names a statement's own expressions use (a compound statement's header only: an
    `if`'s test, a `for`'s target and iterable, not its body)."""
    if statement is None:
        return set()
    parts = []
    for _, value in ast.iter_fields(statement):
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, (ast.expr, ast.arguments, ast.withitem, ast.keyword)):
                parts.append(item)
    return {n.id for part in parts for n in ast.walk(part) if isinstance(n, ast.Name)}


def _input_names(tree: ast.Module) -> set[str]:
    """The functions' parameters and every name assigned from an expression that uses one
    (a fixed point over assignments, augmented ones, loops, comprehensions and `:=`)."""
    names = {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    flows = []  # (the names a value uses, the names it is stored in)
    for n in ast.walk(tree):
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.NamedExpr)) and n.value:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            flows.append((n.value, targets))
        elif isinstance(n, (ast.For, ast.comprehension)):
            flows.append((n.iter, [n.target]))
        elif isinstance(n, ast.withitem) and n.optional_vars is not None:
            flows.append((n.context_expr, [n.optional_vars]))
    flows = [({m.id for m in ast.walk(value) if isinstance(m, ast.Name)},
              {m.id for t in targets for m in ast.walk(t) if isinstance(m, ast.Name)})
             for value, targets in flows]
    while True:
        grown = names.union(*(stored for used, stored in flows if used & names))
        if grown == names:
            return names
        names = grown
