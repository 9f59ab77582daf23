"""What one task's twin checks may cost the others, and which known tasks they are checked
against (red-team s25 F3-F5)."""

import pytest

from spade_ray.records import TaskFamily
from spade_ray.tasks.admission import AdmissionConfig, admit
from spade_ray.tasks.decontamination import HeldOut, known_tasks
from spade_ray.tasks.format import parse_proposal
from tests.tasks.test_decontamination import LIMITS

AUGMENTED = AdmissionConfig(augment_inputs=8)


def text(body: str, inputs: str, description: str = "Do it.") -> str:
    return f"Description: {description}\nReference:\n{body}\nInputs:\n{inputs}"


HONEST = [  # three-argument tasks on str and list arguments (s24's red team)
    text("def interleave(a: str, b: str, fill: str) -> str:\n    n = max(len(a), len(b))\n"
         "    a, b = a.ljust(n, fill), b.ljust(n, fill)\n"
         "    return ''.join(x + y for x, y in zip(a, b))\n",
         "interleave('abc', 'xy', '-')\ninterleave('', 'hey', '.')\n"
         "interleave('long', 's', '*')\ninterleave('pq', 'rs', '_')\n"
         "interleave('a', 'bcdef', '+')\ninterleave('mn', '', '=')"),
    text("def sum_three(xs: list, ys: list, zs: list) -> list:\n"
         "    n = max(len(xs), len(ys), len(zs))\n    pad = lambda v: v + [0] * (n - len(v))\n"
         "    return [x + y + z for x, y, z in zip(pad(xs), pad(ys), pad(zs))]\n",
         "sum_three([1, 2], [3], [4, 5, 6])\nsum_three([], [1], [])\n"
         "sum_three([7, 7, 7], [1, 2, 3], [0])\nsum_three([5], [5], [5])\n"
         "sum_three([2, 4, 6, 8], [], [1, 1])\nsum_three([9, 0], [0, 9], [3, 3])"),
    text("def frame(word: str, left: str, right: str) -> str:\n    if len(word) % 2:\n"
         "        return left + word[::-1] + right\n    return left * 2 + word.upper() + right\n",
         "frame('abc', '<', '>')\nframe('ab', '[', ']')\nframe('hello', '(', ')')\n"
         "frame('', '{', '}')\nframe('xyzw', '/', '+')\nframe('q', '|', '|')"),
]
# spins 20-30 ms (under CALL_S) on any argument but an int, then raises: never killed, and a
# raise is no evidence, so each item went on until too few examples were left to agree
SPIN = ("def {name}(a: int, b: int = 1, c: int = 0) -> int:\n    if type(a) is not int:\n"
        "        spent = 0\n        for i in range(250000):\n            spent += i\n"
        "        raise ValueError('a must be an int')\n"
        "    return (a * {k} + b * b) % {m} - c\n")
SPIN_INPUTS = "\n".join(f"{{name}}({args})" for args in
                        ("3", "5, 2", "10, 3, 4", "17, 1, 9", "8, 6", "21, 4, 2"))


def planted(i: int) -> str:
    name = ["weave", "braid", "knot", "twist"][i]
    return text(SPIN.format(name=name, k=7 + 4 * i, m=1000 - 37 * i),
                SPIN_INPUTS.format(name=name), "A formula on ints.")


def chunk(sandbox, texts, known=(), held=()):
    proposals = [parse_proposal(t) for t in texts]
    return admit(proposals, [TaskFamily.CODEGEN] * len(proposals), ["t"] * len(proposals),
                 sandbox, LIMITS, AUGMENTED, held_out=held, known=known)


@pytest.mark.parametrize("where", ["archive", "chunk"])
def test_known_tasks_that_spin_then_raise_leave_honest_tasks_checked(sandbox, where):
    """Four tasks whose references spin just under CALL_S and raise on foreign arguments,
    archived or written in the same chunk, made every honest 3-argument task of the chunk
    twin_check_slow (-0.5 each; red-team s25 F3). Now a problem's raising calls on one task
    may take RAISE_S in all."""
    plants = [parse_proposal(planted(i)) for i in range(4)]
    if where == "archive":
        known = tuple(HeldOut(f"archive/{p.entry_point}", p.reference, p.entry_point)
                      for p in plants)
        verdicts = chunk(sandbox, HONEST, known)
    else:
        verdicts = chunk(sandbox, [planted(i) for i in range(4)] + HONEST)
    assert [v.reason for v in verdicts] == [""] * len(verdicts)


STICK = text("def base7_length(n: int) -> int:\n    count = 0\n    while n > 0:\n"
             "        n //= 7\n        count += 1\n    return count\n",
             "base7_length(1000000000000)\nbase7_length(7)\nbase7_length(123)\n"
             "base7_length(4567)\nbase7_length(90)\nbase7_length(31415)",
             "Count the base-7 digits of a positive n.")
HE60 = text("def sum_to_n(n: int):\n    return sum(range(n + 1))\n",
            "\n".join(f"sum_to_n({n})" for n in (30, 100, 5, 10, 1, 7, 12)))
X = text("def odd_total(n: int) -> int:\n    return sum(range(1, n + 1, 2))\n",
         "\n".join(f"odd_total({n})" for n in (9, 20, 1, 15, 44, 7, 100)))
X2 = text("def sum_of_odds(limit: int) -> int:\n    total = 0\n    k = 1\n"
          "    while k <= limit:\n        total += k\n        k += 2\n    return total\n",
          "\n".join(f"sum_of_odds({n})" for n in (100, 7, 44, 15, 1, 20, 9)))


@pytest.mark.parametrize("order", ["copy first", "copy last"])
def test_a_task_that_sticks_a_problem_hides_no_copy_of_it_in_its_chunk(sandbox, order):
    """base7_length(10**12) sticks HumanEval/60's sum(range(n + 1)) in one C call: the problem
    was dropped for the run, and a verbatim /60 written before it was admitted (red-team s25
    F4); the same drop let a rewrite of a C-bound task of the chunk through as new."""
    from tests.tasks.test_decontamination import problem
    texts = [HE60, STICK] if order == "copy first" else [STICK, HE60]
    verdicts = {v.proposal.entry_point: v.reason
                for v in chunk(sandbox, texts, held=(problem("HumanEval/60"),))}
    assert verdicts == {"sum_to_n": "validation_twin:HumanEval/60", "base7_length": ""}
    texts = [X, X2, STICK] if order == "copy first" else [STICK, X, X2]
    verdicts = {v.proposal.entry_point: v.reason for v in chunk(sandbox, texts)}
    assert verdicts == {"odd_total": "", "sum_of_odds": "known_twin", "base7_length": ""}


UNIVERSAL = text("def tidy(x, y=None):\n    if isinstance(x, list):\n"
                 "        return [v * v for v in x]\n    if isinstance(x, str):\n"
                 "        return x[::2]\n    return (x * 37 + 11) % 101\n",
                 "\n".join(f"tidy({n})" for n in (3, 5, 10, 17, 8, 21)),
                 "Thirty-seven times x plus eleven, modulo 101.")
SHAPES = [
    text("def squares(nums: list) -> list:\n    out = []\n    for n in nums:\n"
         "        out.append(n * n)\n    return out\n",
         "squares([1, 2, 3])\nsquares([])\nsquares([-4, 5])\nsquares([10, 0, 7, 2])\n"
         "squares([6])\nsquares([3, 3, 9])"),
    text("def every_other(text: str) -> str:\n    kept = []\n    for i, c in enumerate(text):\n"
         "        if i % 2 == 0:\n            kept.append(c)\n    return ''.join(kept)\n",
         "every_other('Hello')\nevery_other('')\nevery_other('aBc DeF')\n"
         "every_other('123 xY!')\nevery_other('ZZ top')\nevery_other('mIxEd')"),
]


@pytest.mark.parametrize("where", ["archive", "chunk"])
def test_a_known_task_is_checked_only_on_the_kinds_of_arguments_it_was_admitted_on(sandbox,
                                                                                  where):
    """A task admitted on ints whose reference squares lists and halves strs in branches its
    examples never reach, archived or earlier in the chunk, made later honest tasks of those
    shapes known_twin (-1 each) and was preferred to them (red-team s25 F5)."""
    (u,) = chunk(sandbox, [UNIVERSAL])
    assert u.valid
    if where == "archive":
        verdicts = chunk(sandbox, SHAPES, known_tasks([u.task]))
    else:
        verdicts = chunk(sandbox, [UNIVERSAL] + SHAPES)[1:]
    assert [v.reason for v in verdicts] == ["", ""]
    # a real copy of it is still one, on ints or floats
    copy = text("def spin(n: int) -> int:\n    return (37 * n + 11) % 101\n",
                "\n".join(f"spin({n})" for n in (4, 9, 12, 30, 2, 55)))
    assert [v.reason for v in chunk(sandbox, [copy], known_tasks([u.task]))] == ["known_twin"]
