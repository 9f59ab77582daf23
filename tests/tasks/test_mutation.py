from spade_ray.tasks.mutation import mutants

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
