import ast

from spade_ray.tasks import mutation


def mutants(source: str, limit: int, seed: int = 0) -> list[str]:
    return [m.code for m in mutation.mutants(source, limit, seed)]


SOURCE = """def f(xs, k):
    total = 0
    for x in xs:
        if x <= k and not x < 0:
            total += x * 2
    return max(total, 1)
"""


def test_each_mutant_differs_by_one_operator_and_is_valid_python():
    out = mutants(SOURCE, limit=50)
    assert len(out) == len(set(out)) >= 9
    for code in out:
        compile(code, "<mutant>", "exec")
    assert any("x < k" in m for m in out) and any("or" in m for m in out)
    assert any("min(total" in m for m in out) and any("total -= x" in m for m in out)


def test_sample_is_seeded_and_capped():
    assert mutants(SOURCE, 3, seed=1) == mutants(SOURCE, 3, seed=1)
    assert len(mutants(SOURCE, 3)) == 3


def test_unparsable_source_has_no_mutants():
    assert mutants("def f(:\n", 5) == []


def test_conditions_of_literals_alone_are_not_mutated():
    """They are the same for every input: their mutants would only raise everywhere."""
    guard = "def f(x):\n    if not (2 < 3 and 6 // 2 == 3):\n        raise ValueError\n"
    assert mutants(guard + "    return x\n", 50) == []
    out = mutants(guard + "    return -1 if x < 0 else x * 2\n", 50)
    assert out and all("not (2 < 3 and 6 // 2 == 3)" in m for m in out)
    assert any("return 1 if" in m for m in out) and any("x <= 0" in m for m in out)


def test_string_constants_methods_and_operator_functions_are_sites():
    out = mutants("def f(s):\n    \"\"\"Doc.\"\"\"\n    return s.replace('zzz', 'Q').upper()\n", 50)
    assert sorted(m.splitlines()[-1].strip() for m in out) == [
        "return s.replace('zzz', 'Q').lower()", "return s.replace('zzz', 'QX').upper()",
        "return s.replace('zzzX', 'Q').upper()"]  # the docstring is no site
    out = mutants("import operator\nfrom operator import gt\ndef f(a, b):\n"
                  "    return operator.add(a, b) if gt(a, b) else 0\n", 50)
    assert any("operator.sub(a, b)" in m for m in out)
    assert any("__import__('operator').ge(a, b)" in m for m in out)
    for code in out:
        compile(code, "<mutant>", "exec")


def test_a_mutation_in_code_no_input_reaches_is_marked_fixed():
    source = ("def f(a, b, scale=1):\n    k, m = 1, 2\n    base = k * m - 2\n    c = a + 1\n"
              "    if c > 5:\n        return a * b + base\n    return a + b * scale\n")
    original = ast.unparse(ast.parse(source)).splitlines()
    fixed = {}
    for m in mutation.mutants(source, 100):
        changed = [i for i, line in enumerate(m.code.splitlines()) if line != original[i]]
        fixed.setdefault(changed[0], set()).add(m.fixed)
    # the default, the constants and what is computed from them alone: no input reaches them
    assert fixed == {0: {True}, 1: {True}, 2: {True}, 3: {False}, 4: {False}, 5: {False},
                     6: {False}}
