"""The imports a generated reference forgot: added for unbound standard-library names only."""

import ast

import pytest

from spade_ray.tasks.imports import ALLOWED_IMPORTS, KNOWN, missing_imports, with_missing_imports


def test_unbound_names_get_their_import_in_order_of_first_use():
    source = ("@lru_cache\ndef f(s: List[str]) -> int:\n"
              "    return len(Counter(s)) + math.floor(heappop([1.5]))\n")
    assert missing_imports(ast.parse(source)) == [
        "from functools import lru_cache", "from typing import List",
        "from collections import Counter", "import math", "from heapq import heappop"]
    fixed = with_missing_imports(source)
    assert fixed == "\n".join(missing_imports(ast.parse(source))) + "\n" + source
    namespace = {}
    exec(compile(fixed, "ref", "exec"), namespace)
    assert namespace["f"](("a", "b", "a")) == 3


@pytest.mark.parametrize("binding", [
    "import collections as Counter", "from x import Counter", "Counter = dict",
    "def Counter(s):\n    return s", "class Counter:\n    pass",
    "for Counter in []:\n    pass", "try:\n    pass\nexcept ValueError as Counter:\n    pass",
    "y = [Counter for Counter in range(2)]", "def g(Counter):\n    return Counter",
    "with open('x') as Counter:\n    pass", "(Counter := 1)"])
def test_a_name_the_program_binds_anywhere_is_left_alone(binding):
    assert missing_imports(ast.parse(binding + "\ndef f(s):\n    return Counter(s)\n")) == []


def test_names_of_another_meaning_and_builtins_are_never_guessed():
    source = "def f(xs):\n    return count(xs) + e + repeat + sum(xs) + foo\n"
    assert with_missing_imports(source) == source


def test_the_imports_go_after_the_docstring_and_future_imports():
    source = '"""Doc."""\nfrom __future__ import annotations\ndef f(n):\n    return sqrt(n)\n'
    fixed = with_missing_imports(source)
    assert fixed.splitlines()[2] == "from math import sqrt" and fixed.count("import sqrt") == 1
    compile(fixed, "ref", "exec")


@pytest.mark.parametrize("odd", ["\u2028", "\x0c", "\x1c", "\x85"])
def test_a_docstring_holding_a_character_str_splitlines_breaks_at_keeps_the_imports_out(odd):
    fixed = with_missing_imports(f'"""doc{odd}more"""\ndef f(n):\n    return sqrt(n)\n')
    namespace = {}
    exec(compile(fixed, "ref", "exec"), namespace)
    assert namespace["f"](9) == 3 and namespace["__doc__"] == f"doc{odd}more"


def test_every_module_the_table_names_is_one_admission_allows():
    modules = {m or name for name, m in KNOWN.items()}
    assert modules <= ALLOWED_IMPORTS
    for name, module in KNOWN.items():  # and each name exists there
        assert hasattr(__import__(module or name), name) or not module
