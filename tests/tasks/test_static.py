"""Admission's static rules (tasks/static.py): every known way from an allowed module or a
builtin to another module, the clock or the interpreter is refused; ordinary code is not."""

import pytest

from spade_ray.evaluation import humaneval
from spade_ray.tasks.seeds import load_seed_proposals
from spade_ray.tasks.static import signature_reason, static_reason


@pytest.mark.parametrize("reference, reason", [
    # a module an allowed module imported for itself, by attribute, underscore name or import
    ("import statistics\ndef f(x: int) -> int:\n"
     "    return x + int(statistics.sys.modules['time'].time() // 3) % 2", "forbidden:time"),
    ("import typing\ndef f(x: int) -> int:\n    return x + len(typing.sys.argv)", "forbidden:sys"),
    ("import fractions\ndef f(x: int) -> int:\n    return x + fractions.sys.maxsize % 3",
     "forbidden:sys"),
    ("import collections\ndef f(x: int) -> int:\n    return x + collections._sys.maxsize % 3",
     "forbidden:_sys"),
    ("import statistics\ndef f(x: int) -> int:\n    return x + statistics.random.randint(0, 1)",
     "forbidden:random"),
    ("import re\ndef f(x: int) -> int:\n    return x + len(str(re.enum.auto))", "forbidden:enum"),
    ("import typing\ndef f(x: int) -> int:\n    return x + len(str(typing.types.CodeType))",
     "forbidden:types"),
    ("import re\ndef f(x: int) -> int:\n    return x + len(re.copyreg.dispatch_table)",
     "forbidden:copyreg"),
    ("import typing\ndef f(x: int) -> int:\n    return x + len(typing.warnings.filters)",
     "forbidden:warnings"),
    ("from statistics import sys\ndef f(x: int) -> int:\n    return x + len(sys.argv)",
     "forbidden:sys"),
    ("from typing import sys as s\ndef f(x: int) -> int:\n    return x + len(s.argv)",
     "forbidden:sys"),
    # a lookup by string
    ("import typing\ndef f(x: int) -> int:\n    return x + getattr(typing, 'sys').maxsize % 3",
     "forbidden:getattr"),
    ("import operator, statistics\ndef f(x: int) -> int:\n"
     "    return x + operator.attrgetter('sys.maxsize')(statistics) % 3", "forbidden:attrgetter"),
    ("from operator import methodcaller\ndef f(x: int) -> int:\n"
     "    return x + methodcaller('bit_length')(x)", "forbidden:methodcaller"),
    ("import string, statistics\ndef f(x: int) -> int:\n    return x + int(string.Formatter()"
     ".get_field('0.sys.modules', (statistics,), {})[0]['time'].perf_counter() // 3) % 2",
     "forbidden:get_field"),
    ("def f(x: int) -> int:\n    return x + len(__builtins__)", "forbidden:__builtins__"),
    ("def f(x: int) -> int:\n    return x + len(__name__)", "forbidden:__name__"),
    ("def f(x: int) -> int:\n    return x + len('{0.__globals__}'.format(f))",
     "forbidden:__globals__"),
    # a module as a value: what format strings and Formatter read attributes of
    ("import statistics\ndef f(x: int) -> int:\n    return x + len('{0.sys}'.format(statistics))",
     "forbidden:module_value"),
    ("import statistics as st\ndef f(x: int) -> int:\n    m = st\n    return x",
     "forbidden:module_value"),
    ("from collections import abc\ndef f(x: int) -> int:\n    return x + len([abc])",
     "forbidden:module_value"),
    # frames and code objects
    ("def f(x: int) -> int:\n    g = (i for i in [1])\n    return x + len(g.gi_frame.f_builtins)",
     "forbidden:f_builtins"),
    ("def f(x: int) -> int:\n    g = (i for i in [1])\n    return x + g.gi_code.co_flags",
     "forbidden:co_flags"),
    # a fourth red-team pass: lookups by name that are not attributes, strings built at run time
    ("def f(a: int) -> int:\n    match len:\n        case object(__self__=object(__import__=i)):"
     "\n            return a + int(i('os').times().elapsed // 3) % 2\n    return a",
     "forbidden:match_class"),
    ("def f(a: int) -> int:\n    match (a,):\n        case tuple(gi_frame=g):\n"
     "            return a\n    return a", "forbidden:gi_frame"),
    ("def f(a: int) -> int:\n    M = type('M', (type,), {})\n    return a", "forbidden:type"),
    ("def f(a: int) -> int:\n    t = type\n    return a + len(str(t(a)))", "forbidden:type"),
    ("def f(a: int) -> int:\n    def __instancecheck__(c, x):\n        return True\n"
     "    return a", "forbidden:__instancecheck__"),
    ("from typing import _eval_type, List\ndef f(a: int) -> int:\n    return a",
     "forbidden:_eval_type"),
    ("import functools, statistics\ndef f(a: int) -> int:\n    g = {}\n"
     "    functools.update_wrapper(g, statistics.mean, assigned=(), updated=('_' + '_dict__',))"
     "\n    return a", "forbidden:update_wrapper"),
    ("from statistics import mean\ndef f(a: int) -> int:\n"
     "    return a + len(('{0._' + '_globals__}').format(mean))", "forbidden:format"),
    ("def f(a: int) -> int:\n    return a + len(sys.argv)", "unbound:sys"),
    # evaluated annotations
    ("import typing\ndef g(a: 'len(typing.sys.modules)'):\n    pass\ndef f(x: int) -> int:\n"
     "    return x + typing.get_type_hints(g)['a']", "forbidden:get_type_hints"),
    ("from functools import singledispatch\ndef f(x: int) -> int:\n    return x",
     "forbidden:singledispatch"),
])
def test_every_way_to_another_module_is_refused(reference, reason):
    assert static_reason(reference) == reason


@pytest.mark.parametrize("reference", [
    # red-team s24 H2: all known references are defined in one twin-run process, where these
    # hid a copy of the seed first_greater (a) and made every float agree (b)
    "import bisect\nbisect.bisect_right = bisect.bisect_left\ndef f(x: int) -> int:\n"
    "    return x",
    "import math\ndef near(a, b, **tolerances):\n    return True\nmath.isclose = near\n"
    "def f(x: int) -> int:\n    return x",
    "import math as m\ndef f(x: int) -> int:\n    m.pi += x\n    return x",
    "import bisect\ndef f(x: int) -> int:\n    del bisect.insort\n    return x",
    "import string\ndef f(x: int) -> int:\n    for string.digits in ['ab']:\n        pass\n"
    "    return x",
    "from collections import Counter\ndef f(x: int) -> int:\n    Counter.most_common = len\n"
    "    return x",
    "from collections import *\ndef f(x: int) -> int:\n    del Counter.most_common\n"
    "    return x",
    "from collections import Counter\ndef f(x: int) -> int:\n"
    "    type(Counter()).most_common = len\n    return x",
    "import heapq\ndef f(x: int) -> int:\n    heapq.nsmallest.cache = {x: x}\n"
    "    heapq.nlargest.cache[x] = x\n    return x",
])
def test_writing_to_an_imported_name_is_refused(reference):
    assert static_reason(reference) == "forbidden:module_write"


def test_writing_to_the_programs_own_containers_passes():
    assert static_reason("import math\n_CACHE = {}\ndef f(xs: list) -> int:\n"
                         "    _CACHE[len(xs)] = xs[0] = math.floor(xs[0])\n"
                         "    del xs[1:]\n    return xs[0]") is None


def test_modules_followed_by_an_attribute_and_unknown_submodules_pass():
    assert static_reason("import collections.abc\nfrom collections import abc\n"
                         "def f(x: int) -> bool:\n    return isinstance(x, abc.Sequence) or "
                         "isinstance(x, collections.abc.Set)") is None
    assert static_reason("from collections.nope import x\ndef f(n: int) -> int:\n"
                         "    return n") is None  # it fails when it runs


def test_plain_matches_and_literal_format_strings_pass():
    assert static_reason("def f(a: int) -> str:\n    match a:\n        case int(real=r) if r > 1:"
                         "\n            return '{}!'.format(r)\n        case _:\n"
                         "            return f'{a!r:>{a}}'") is None
    assert static_reason("def f(a: int) -> str:\n    match [a]:\n        case [int(x)]:\n"
                         "            return '{} {}'.format(x, type(x))\n    return ''") is None


def test_names_a_star_import_binds_are_not_free():
    assert static_reason("from math import *\ndef f(x: float) -> float:\n"
                         "    return sqrt(x) + floor(x)") is None
    assert static_reason("from math import *\ndef f(x: float) -> float:\n"
                         "    return x + len(sys.argv)") == "unbound:sys"


def test_namedtuple_methods_are_not_private_attributes():
    assert static_reason("from collections import namedtuple\nP = namedtuple('P', 'a b')\n"
                         "def f(x: int) -> int:\n    return P(x, 1)._replace(b=2).b + x") is None


def test_ordinary_code_passes():
    """No seed reference and no HumanEval solution but the two that use eval and hashlib."""
    assert [static_reason(p.reference) for _, p in load_seed_proposals()].count(None) == \
        len(load_seed_proposals())
    reasons = [static_reason(p.prompt + p.canonical_solution) for p in humaneval.load_problems()]
    assert sorted(r for r in reasons if r) == ["forbidden:eval", "forbidden:hashlib"]


@pytest.mark.parametrize("signature, reason", [
    # red-team pass 10: the def line the solver's prompt ends with carried the answer, and
    # `return weights(word)` passed
    ("def score(word: str, weights=lambda w: sum(map(ord, w))) -> int:", "signature:default"),
    ("def f(n, table=(1, 1, 2, 6, 24)):", "signature:default"),
    ("def f(n, *, table={0: 1}):", "signature:default"),
    ("def f(n, answer=sorted):", "signature:default"),
    ("def f(s, key='abcdefghijklmnopqrstuvwxyz'):", "signature:default"),
    ("def f(x: 'return x * 2'):", "signature:annotation"),
    ("def f(x) -> (lambda: 3):", "signature:annotation"),
    ("def f(*args: print(1)):", "signature:annotation"),
    # ordinary signatures
    ("def f(xs: list[int], k: int = 3, sep: str = ', ') -> dict[str, list[int]] | None:", None),
    ("def f(a=-1.5, *, b=None, c=(), **kw: int) -> typing.Optional[int]:", None),
    ("def f(g: Callable[[int], str], x: tuple[int, ...] = ()) -> None:", None),
])
def test_the_signature_the_prompt_ends_with_gives_nothing_away(signature, reason):
    assert signature_reason(signature) == reason


def test_no_seed_signature_and_no_humaneval_one_is_refused():
    assert [p.signature for _, p in load_seed_proposals() if signature_reason(p.signature)] == []
    lines = [line for p in humaneval.load_problems() for line in p.prompt.splitlines()
             if line.startswith("def ") and line.rstrip().endswith(":")]
    assert len(lines) > 150 and [s for s in lines if signature_reason(s.rstrip())] == []


@pytest.mark.parametrize("error", ["RecursionError", "OverflowError", "MemoryError",
                                   "RuntimeError", "ArithmeticError"])
def test_a_handler_of_an_interpreter_limit_is_refused(error):
    """Red-team s31: `except RecursionError: return -1` past the driver's raised limit, and
    `except OverflowError` around `len(range(...))` past the index size, were admitted with
    answers an honest solution fails."""
    reference = (f"def f(n: int) -> int:\n    try:\n        return len(range(n))\n"
                 f"    except ({error}, ValueError):\n        return -1\n")
    assert static_reason(reference) == f"forbidden:{error}"


@pytest.mark.parametrize("test, reason", [
    ("xs[i] is xs[i + 1]", "forbidden:is"), ("a is not b", "forbidden:is"),
    ("a * 1 is 300", "forbidden:is"), ("0 < a is b", "forbidden:is"),
    ("xs[0] is xs", "forbidden:is"), ("a is BIG", "forbidden:is"), ("a is BIG2", "forbidden:is"),
    ("a is None", None), ("None is not a", None), ("(a is True) is False", None),
    ("a is ...", None), ("a == b", None), ("type(a) is not int", None), ("int is type(b)", None),
    ("xs[i] is MISSING", None),
])
def test_values_are_not_compared_by_identity(test, reason):
    """Red-team s33: `xs[i] is xs[i + 1]` (CPython keeps one object per int from -5 to 256)
    answered "count adjacent equal values" right below 257 and wrong above, and was admitted;
    an honest `==` failed it. Identity with None, True, False, ..., a type or a sentinel the
    module binds is a plain test."""
    reference = "MISSING = object()\nBIG = 300\nBIG2 = int('300')\n\n" \
        f"def f(xs: list, a: int, b: int, i: int) -> bool:\n    return {test}\n"
    assert static_reason(reference) == reason


@pytest.mark.parametrize("body", [
    "import operator\n    return sum(map(operator.is_, xs, xs[1:]))",
    "from operator import is_not\n    return sum(map(is_not, xs, xs[1:]))",
    "MISSING = xs[0]\n    return xs[1] is MISSING",
    "for MISSING in xs[:1]:\n        return xs[1] is MISSING",
    "from operator import *\n    return sum(map(is_, xs, xs[1:]))",
    "n = 0\n    for bytes in xs[1:]:\n        n += bytes is xs[0]\n    return n",
])
def test_identity_by_another_spelling_is_refused(body):
    """Red-team s34: operator's `is_` mapped over the values (named, or from a star import),
    a function's own name shadowing the module's sentinel, and a type's name bound to a value
    compared values by identity and were admitted."""
    reference = f"MISSING = object()\n\n\ndef f(xs: list) -> int:\n    {body}\n"
    assert static_reason(reference) == "forbidden:is"
