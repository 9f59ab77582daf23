"""The imports a program forgot: standard-library names it uses and never binds.

A small model writes `Counter(s)` or `@cache` without the import (a `make run`'s rejected
references had both), and LeetCode's Python environment pre-imports these modules for the same
reason. A generated reference gets the one import line per missing name in its text
(format.parse_proposal), so the task's program is complete as stored and as shown to the
solver. A solver's code or repair candidate gets them in the program the sandbox runs
(families.executable), not in the text it is trained on: a base model's prompt ends with the
signature, so it has no place above it to write an import. HumanEval programs are run as
written.

Only names that the program loads and binds nowhere (no assignment, parameter, def, import,
loop or comprehension target of that name anywhere in it) are added, each from a fixed table of
unambiguous standard-library names within ALLOWED_IMPORTS. A name of a different
meaning (`count`, `e`, `repeat`) is not in the table: guessing it would change a program, not
complete it.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import io

# name -> the module it is taken from ("" for a module used by its own name: `math.sqrt`)
_FROM = {
    "collections": ("Counter", "defaultdict", "deque", "OrderedDict", "namedtuple", "ChainMap"),
    "functools": ("cache", "lru_cache", "reduce", "partial", "cmp_to_key"),
    "itertools": ("permutations", "combinations", "combinations_with_replacement", "product",
                  "accumulate", "groupby", "zip_longest", "islice", "starmap", "pairwise"),
    "heapq": ("heappush", "heappop", "heapify", "heappushpop", "heapreplace", "nlargest",
              "nsmallest"),
    "bisect": ("bisect_left", "bisect_right", "insort", "insort_left", "insort_right"),
    "math": ("gcd", "lcm", "sqrt", "isqrt", "factorial", "comb", "perm", "ceil", "floor",
             "log2", "log10", "prod", "inf"),
    "typing": ("List", "Dict", "Tuple", "Set", "Optional", "Any", "Union", "Iterable",
               "Sequence"),
    "string": ("ascii_lowercase", "ascii_uppercase", "ascii_letters", "digits", "punctuation"),
}
# the modules a task's program may import (admission rejects any other as forbidden:<name>)
ALLOWED_IMPORTS = frozenset({"math", "itertools", "functools", "collections", "string", "re",
                             "heapq", "bisect", "operator", "typing", "fractions", "statistics"})
KNOWN = {name: module for module, names in _FROM.items() for name in names} | \
    {module: "" for module in sorted(ALLOWED_IMPORTS)}


def missing_imports(tree: ast.Module) -> list[str]:
    """The import lines for the table's names that `tree` loads and never binds, in order of
    first use."""
    return [f"from {KNOWN[name]} import {name}" if KNOWN[name] else f"import {name}"
            for name in free_names(tree) if name in KNOWN]


def free_names(tree: ast.Module) -> list[str]:
    """The names `tree` loads and binds nowhere (bindings()), builtins aside, each once, in
    order of first use."""
    bound = set(dir(builtins)) | set(bindings(tree))
    loaded = (n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
              and isinstance(n.ctx, ast.Load))
    return [name for name in dict.fromkeys(loaded) if name not in bound]


def bindings(tree: ast.Module) -> list[str]:
    """Every name `tree` binds, once per place that binds it: an assignment, parameter, def,
    import, loop, comprehension, except or match target; a star import of an allowed module
    binds its public names."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            out.append(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append(node.name)
        elif isinstance(node, ast.arg):
            out.append(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out += [(a.asname or a.name).split(".")[0] for a in node.names]
            if isinstance(node, ast.ImportFrom) and node.module and \
                    node.module.split(".")[0] in ALLOWED_IMPORTS and \
                    any(a.name == "*" for a in node.names):
                out += _public_names(node.module)
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            out.append(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            out.append(node.rest)
    return out


@functools.cache
def _public_names(module: str) -> frozenset[str]:
    """What `from module import *` binds (an allowed module: the standard library's)."""
    try:
        found = importlib.import_module(module)
    except ImportError:  # collections.nope: the program fails when it runs
        return frozenset()
    return frozenset(getattr(found, "__all__", None) or
                     (name for name in vars(found) if not name.startswith("_")))


def with_missing_imports(source: str) -> str:
    """`source` with the import lines it lacks, placed after its docstring and `__future__`
    imports."""
    tree = ast.parse(source)
    lines = missing_imports(tree)
    if not lines:
        return source
    head = 0
    for node in tree.body:
        if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                or isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            break
        head = node.end_lineno
    # Lines as the parser counts them (\n, \r\n, \r): str.splitlines also splits at U+2028,
    # \x0c and others, which put the imports inside a docstring holding one.
    source_lines = io.StringIO(source, newline="").readlines()
    return "".join([*source_lines[:head], *(line + "\n" for line in lines),
                    *source_lines[head:]])
