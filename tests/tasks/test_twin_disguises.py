"""Copies under a one-line change of the answer or of the call are twins (red-team s25 F1).

Each was admitted before: the validation solution's body verbatim with its answer shifted,
scaled, negated, wrapped, paired with a by-product or printed in a sentence; its two arguments
written into one text; a defaulted extra parameter one call passes; two problems on a mode
flag; a bool problem answering 1/0 beside one input it raises on; and the same changes of a
seed's answer against the known run."""

import pytest

from spade_ray.execution.canonical import example
from spade_ray.records import TaskFamily
from spade_ray.tasks.admission import AdmissionConfig, admit
from spade_ray.tasks.decontamination import HeldOut, twins
from spade_ray.tasks.seeds import load_seed_proposals
from tests.tasks.test_decontamination import HUMANEVAL, LIMITS, problem, proposal

AUGMENTED = AdmissionConfig(augment_inputs=8)  # as the gemma configs admit generated tasks
HE18 = ("def {name}(string: str, substring: str{extra}):\n    times = 0\n"
        "    for i in range({start}len(string) - len(substring) + 1):\n"
        "        if string[i:i+len(substring)] == substring:\n            times += 1\n"
        "    return {ret}\n")  # HumanEval/18's body
IN18 = [("abcabcab", "ab"), ("aaaa", "aa"), ("xyz", "q"), ("banana", "ana"),
        ("mississippi", "ss"), ("cacacac", "cac"), ("hello world", "o"), ("zzzzzz", "z")]


def calls(name: str, inputs) -> str:
    return "\n".join(f"{name}({', '.join(map(repr, args))})" for args in inputs)


def reason(sandbox, p, held=(), known=(), config=AUGMENTED) -> str:
    (v,) = admit([p], [TaskFamily.CODEGEN], ["text"], sandbox, LIMITS, config, held_out=held,
                 known=known)
    return v.reason


@pytest.mark.parametrize("ret", ["times + 1", "3 * times", "-times", "[times]",
                                 "(times, len(string))", "'found ' + str(times)",
                                 "str(times) + ' found'"])
def test_a_validation_answer_changed_in_one_line_is_a_twin(sandbox, ret):
    copy = proposal(HE18.format(name="count_overlapping", extra="", start="", ret=ret),
                    calls("count_overlapping", IN18), "Count the occurrences, overlaps included.")
    assert reason(sandbox, copy) == ""
    assert reason(sandbox, copy, (problem("HumanEval/18"),)) == "validation_twin:HumanEval/18"


def test_arguments_written_into_one_text_hide_no_twin(sandbox):
    copy = proposal("def count_overlapping(query: str) -> int:\n"
                    "    string, substring = query.split('|')\n"
                    + HE18.split(":\n", 1)[1].format(start="", ret="times"),
                    calls("count_overlapping", [("|".join(p),) for p in IN18]))
    assert reason(sandbox, copy, (problem("HumanEval/18"),)) == "validation_twin:HumanEval/18"


@pytest.mark.parametrize("swap", [False, True])
def test_a_defaulted_parameter_one_call_passes_hides_no_twin(sandbox, swap):
    """The calls had two arities: no other mapping was tried, and HumanEval/18's signature did
    not bind three arguments, so it was skipped on every mapping."""
    inputs = [(b, a) if swap else (a, b) for a, b in IN18[:-1]] + \
        [("z", "zzzzzz", 0) if swap else ("zzzzzz", "z", 0)]
    body = HE18.format(name="occurrences", extra=", start: int = 0", start="start, ",
                       ret="times")
    if swap:
        body = body.replace("string: str, substring: str", "substring: str, string: str")
    copy = proposal(body, calls("occurrences", inputs))
    assert reason(sandbox, copy, (problem("HumanEval/18"),)) == "validation_twin:HumanEval/18"


def test_two_problems_on_a_mode_flag_are_each_a_twin(sandbox):
    """HumanEval/13 (gcd) and /49 (2^n mod p) on one flag, all ints: each problem answers
    every example and agreed on about half."""
    dual = proposal("def dual(mode: int, a: int, b: int) -> int:\n    if mode == 0:\n"
                    "        while b:\n            a, b = b, a % b\n        return a\n"
                    "    ret = 1\n    for i in range(a):\n        ret = (2 * ret) % b\n"
                    "    return ret\n",
                    calls("dual", [(0, 48, 18), (1, 3, 5), (0, 100, 75), (1, 1101, 101),
                                   (0, 17, 5), (1, 10, 7), (0, 144, 60), (1, 100, 101),
                                   (0, 81, 27), (1, 31, 13), (0, 210, 49), (1, 20, 11)]))
    assert reason(sandbox, dual) == ""
    assert reason(sandbox, dual, (problem("HumanEval/13"),)) == "validation_twin:HumanEval/13"
    assert reason(sandbox, dual, (problem("HumanEval/49"),)) == "validation_twin:HumanEval/49"


@pytest.mark.parametrize("yes, no", [("1", "0"), ("'up or down'", "'both'")])
def test_a_relabelled_bool_copy_with_an_input_the_problem_raises_on_is_a_twin(sandbox, yes, no):
    """One input outside HumanEval/57's domain (None, which the copy guards) switched s24 H3's
    relabel rule off."""
    copy = proposal(f"def one_direction(l) -> int:\n    if l is None:\n        return {no}\n"
                    f"    if l == sorted(l) or l == sorted(l, reverse=True):\n"
                    f"        return {yes}\n    return {no}\n",
                    calls("one_direction", [(xs,) for xs in (
                        [1, 2, 4, 10], [1, 2, 4, 20], [1, 20, 4, 10], [4, 1, 0, -10],
                        [4, 1, 1, 0], [1, 2, 3, 2, 5, 60], [9, 9, 9, 9], [3, 1, 2], None)]))
    assert reason(sandbox, copy, (problem("HumanEval/57"),)) == "validation_twin:HumanEval/57"


COLLATZ = ("def hailstone_length(n: int) -> int:\n    steps = 0\n    while n != 1:\n"
           "        n = n // 2 if n % 2 == 0 else 3 * n + 1\n        steps += 1\n"
           "    return {ret}\n", [(n,) for n in (1, 2, 6, 7, 27, 9, 12)], "collatz_steps")
KADANE = ("def best_run(xs: list) -> int:\n    if not xs:\n        return 0\n"
          "    best = current = xs[0]\n    for x in xs[1:]:\n"
          "        current = max(x, current + x)\n        best = max(best, current)\n"
          "    return {ret}\n", [([-2, 1, -3, 4, -1, 2, 1, -5, 4],), ([-3, -1, -2],), ([5],),
                                ([2, -1, 2],), ([1, 2, 3],), ([4, -9, 6, 1],)],
          "max_subarray_sum")


@pytest.mark.parametrize("seed, ret", [(COLLATZ, "steps + 1"), (COLLATZ, "(steps, n)"),
                                       (KADANE, "2 * best"), (KADANE, "[best]")])
def test_a_seed_answer_changed_in_one_line_is_a_known_twin(sandbox, seed, ret):
    body, inputs, name = seed
    (original,) = [p for _, p in load_seed_proposals() if p.entry_point == name]
    known = (HeldOut(f"seed/{name}", original.reference, original.entry_point),)
    copy = proposal(body.format(ret=ret), calls(body[4:body.index("(")], inputs),
                    "Walk the sequence and report the figure.")
    assert reason(sandbox, copy) == ""
    assert reason(sandbox, copy, known=known) == "known_twin"


HONEST = [  # the red-team scripts' honest tasks: still admitted against all of HumanEval
    ("def interleave(a: str, b: str, fill: str) -> str:\n    n = max(len(a), len(b))\n"
     "    a, b = a.ljust(n, fill), b.ljust(n, fill)\n"
     "    return ''.join(x + y for x, y in zip(a, b))\n",
     "interleave('abc', 'xy', '-')\ninterleave('', 'hey', '.')\ninterleave('long', 's', '*')\n"
     "interleave('pq', 'rs', '_')\ninterleave('a', 'bcdef', '+')\ninterleave('mn', '', '=')"),
    ("def frame(word: str, left: str, right: str) -> str:\n    if len(word) % 2:\n"
     "        return left + word[::-1] + right\n    return left * 2 + word.upper() + right\n",
     "frame('abc', '<', '>')\nframe('ab', '[', ']')\nframe('hello', '(', ')')\n"
     "frame('', '{', '}')\nframe('xyzw', '/', '+')\nframe('q', '|', '|')"),
    ("def squares(xs: list) -> list:\n    out = []\n    for x in xs:\n"
     "        out.append(x * x)\n    return out\n",
     "squares([1, 2, 3])\nsquares([])\nsquares([-4, 5])\nsquares([7])\nsquares([0, 0, 9])"),
    ("def base7_length(n: int) -> int:\n    count = 0\n    while n > 0:\n"
     "        n //= 7\n        count += 1\n    return count\n",
     "base7_length(7)\nbase7_length(123)\nbase7_length(4567)\nbase7_length(98765)\n"
     "base7_length(10)\nbase7_length(100200300)"),
    ("def tag_count(text: str, mode: int) -> str:\n    if mode == 0:\n"
     "        return 'words: ' + str(len(text.split()))\n"
     "    return 'letters: ' + str(sum(c.isalpha() for c in text))\n",
     "tag_count('a b c', 0)\ntag_count('hello there', 1)\ntag_count('one', 0)\n"
     "tag_count('x y z w v', 0)\ntag_count('abc def', 1)\ntag_count('', 0)\n"
     "tag_count('q r', 1)\ntag_count('lots of words here now', 0)"),
    # red-team s31: string tasks whose output starts with the argument's first character were
    # twins of HumanEval/12 (longest(strings) walked the str and returned that character;
    # sorting a word's characters is a twin still, of /86's anti_shuffle)
    *[(f"def {name}(s: str) -> str:\n    return {ret}\n",
       "\n".join(f"{name}({w!r})" for w in ("abcdef", "xyz", "hello", "qrstu", "mnop", "dcba")))
      for name, ret in (("evens_odds", "s[::2] + s[1::2]"), ("ask", "s[:-1] + '?'"),
                        ("doubled", "''.join(c * 2 for c in s)"), ("rot2", "s[2:] + s[:2]"))],
    # outputs backwards that are no validation answer reversed (the reversal rule, s31)
    ("def suffix_max(xs: list) -> list:\n    out, best = [], None\n    for x in reversed(xs):\n"
     "        best = x if best is None or x > best else best\n        out.append(best)\n"
     "    return out[::-1]\n",
     "suffix_max([5, 3, 5, 2, 3, 3, 9, 0, 123])\nsuffix_max([4, 1, 4, 7])\n"
     "suffix_max([2, 8, 8, 1, 6, 1])\nsuffix_max([10, 20, 10])\nsuffix_max([3, 1, 2])\n"
     "suffix_max([7, 7, 1, 0, -3])"),
    ("def mirror_words(s: str) -> str:\n    return ' '.join(w[::-1] for w in s.split(' '))\n",
     "mirror_words('the quick brown fox')\nmirror_words('a b c')\nmirror_words('hello world')\n"
     "mirror_words('one two')\nmirror_words('x y z w v')\nmirror_words('red green blue')"),
]


@pytest.mark.parametrize("body, inputs", HONEST)
def test_honest_tasks_are_no_twins_of_humaneval(sandbox, body, inputs):
    assert reason(sandbox, proposal(body, inputs), HUMANEVAL) == ""


IS_PRIME = ("def is_prime(n: int) -> bool:\n    if n < 2:\n        return False\n"
            "    k = 2\n    while k * k <= n:\n        if n % k == 0:\n"
            "            return False\n        k += 1\n    return True\n")
FAST = [6, 101, 11, 13441, 61, 4, 1, 5, 17, 85, 77]


@pytest.mark.parametrize("slow", [[10000019], [10000019, 20000003]])
@pytest.mark.parametrize("first", [False, True])
def test_a_copy_with_a_slow_example_or_two_is_a_twin(sandbox, slow, first):
    """An efficient is_prime plus one input on which HumanEval/31's loop to n is slower than
    CALL_S was admitted: a Late ended the mapping as no twin (red-team s25). After an agreeing
    answer it no longer did, but before any it still did: the slow inputs written first hid
    the copy."""
    inputs = slow + FAST if first else FAST + slow
    copy = proposal(IS_PRIME, calls("is_prime", [(n,) for n in inputs]),
                    "Return whether n is prime.")
    assert reason(sandbox, copy, (problem("HumanEval/31"),)) == "validation_twin:HumanEval/31"


# What the default model wrote in a make run (s24, round 2): bisect_right, with the examples
# admission gave it (augment_inputs=8). HumanEval/76's is_simple_power(x, n), called (x, xs),
# raises on 3 of them and answers the other 9 True exactly where the index is 1.
FIRST_GREATER = [(([1, 2, 2, 3], 2), 3), (([1, 2, 3], -1), 0), (([1, 2, 3], 2), 2),
                 (([1, 2, 3], 1), 1), (([1, 2, 2, 3], 4), 4), (([1, 2, 2, 3], 0), 0),
                 (([1, 3], 1), 1), (([2, 1, 2, 3], 2), 3), (([2, 3], -1), 0),
                 (([1, 2, 3], 0), 0), (([1, 2, 2, 3], 1), 1), (([1, 2, 3], -2), 0)]


def test_a_problem_answering_a_few_examples_by_accident_makes_no_twin(sandbox):
    examples = [example(args, out) for args, out in FIRST_GREATER]
    check = twins([examples], (problem("HumanEval/76"),), sandbox, LIMITS)
    assert check.found == (None,) and not check.slow[0]


ODD_DIGITS = ("def odd_digit_product(n{ann}) -> int:\n    product, odd = 1, 0\n"
              "    for digit in str(n):\n        if int(digit) % 2:\n"
              "            product, odd = product * int(digit), odd + 1\n"
              "    return product if odd else 0\n")  # HumanEval/131's
ODD_AT_EVEN = ("def odd_at_even(lst{ann}) -> int:\n"  # HumanEval/121's
               "    return sum(x for i, x in enumerate(lst) if i % 2 == 0 and x % 2 == 1)\n")
NUMBERS = [12345, 2468, 97531, 5, 120, 3077, 864213, 11]
LISTS = [[5, 8, 7, 1], [3, 3, 3, 3, 3], [30, 13, 24, 121], [5, 9], [2, 4, 8], [30, 13, 23, 32],
         [3, 13, 2, 9]]


@pytest.mark.parametrize("body, args, problem_id", [
    (ODD_DIGITS.format(ann=": str"), [(str(n),) for n in NUMBERS], "HumanEval/131"),
    (ODD_AT_EVEN.format(ann=": bytes"), [(bytes(xs),) for xs in LISTS], "HumanEval/121"),
], ids=["digit_str_for_an_int", "bytes_for_a_list"])
def test_a_copy_called_with_another_kind_of_argument_is_a_twin(sandbox, body, args, problem_id):
    """Red-team s31 pass 20: checked only on the kinds its test passes, a problem whose solution
    handles other kinds alike missed such copies (82 of the 164 answered one so); its answer
    agreeing exactly counts on every call, as before."""
    copy = proposal(body, calls(body[4:body.index("(")], args))
    assert reason(sandbox, copy, (problem(problem_id),)) == f"validation_twin:{problem_id}"


REMOVE_DUPLICATES = ("def singles(numbers: list) -> list:\n"
                     "    return [n for n in numbers if numbers.count(n) == 1]{rev}\n")  # /26's


@pytest.mark.parametrize("body, args, problem_id", [
    (REMOVE_DUPLICATES.format(rev="[::-1]"),
     [([1, 2, 3, 2, 4],), ([5, 6, 5, 7, 8],), ([1, 1, 2, 3, 4, 5],), ([9, 8, 7],), ([4, 4, 1, 2],),
      ([3, 1, 4, 1, 5, 9, 2, 6],)], "HumanEval/26"),
    ("def flip_back(s: str) -> str:\n    return s.swapcase()[::-1]\n",
     [("xyzXYZ",), ("Jerry jERRY",), ("abcde",), ("aaBBcc dd",), ("Hello World",), ("Q",)],
     "HumanEval/27"),
], ids=["list", "str"])
def test_a_validation_answer_reversed_is_a_twin(sandbox, body, args, problem_id):
    """Red-team s31: both were admitted."""
    copy = proposal(body, calls(body[4:body.index("(")], args))
    assert reason(sandbox, copy, (problem(problem_id),)) == f"validation_twin:{problem_id}"


FIB4 = ("def {name}(n: int):\n    results = [0, 0, 2, 0]\n    if n < 4:\n"
        "        return results[n]\n    for _ in range(4, n + 1):\n"
        "        results.append(results[-1] + results[-2] + results[-3] + results[-4])\n"
        "        results.pop(0)\n    return results[-1]\n")  # HumanEval/46's
ROLLING_MAX = ("def {name}(numbers: list) -> list:\n    running_max = None\n    result = []\n"
               "    for n in numbers:\n        running_max = n if running_max is None "
               "else max(running_max, n)\n        result.append(running_max)\n"
               "    return result\n")  # HumanEval/9's
LISTS = [[5, 3, 5, 2, 3, 3, 9, 0, 123], [4, 1, 4, 7], [2, 8, 8, 1, 6, 1], [10, 20, 10, 30],
         [3, 1, 2, 9, 4], [1, 2, 3]]


@pytest.mark.parametrize("body, args, problem_id", [
    (FIB4.format(name="_one") + "\n\ndef quad_terms(ns: list) -> list:\n"
     "    return [_one(n) for n in ns]\n",
     [([5, 6],), ([7, 9, 10],), ([12],), ([8, 11, 4],), ([13, 6, 5],), ([14, 3],)],
     "HumanEval/46"),
    (ROLLING_MAX.format(name="_roll") + "\n\ndef running_tops(groups: list) -> list:\n"
     "    return [_roll(g) for g in groups]\n",
     [([a, b],) for a, b in zip(LISTS, LISTS[1:] + LISTS[:1])], "HumanEval/9"),
    ("def running_tops(text: str) -> list:\n    numbers = [int(t) for t in text.split()]\n"
     + ROLLING_MAX.split(":\n", 1)[1].format(), [(" ".join(map(str, xs)),) for xs in LISTS],
     "HumanEval/9"),
], ids=["scalars", "lists", "as_text"])
def test_a_validation_problem_mapped_over_a_list_or_given_as_text_is_a_twin(sandbox, body, args,
                                                                          problem_id):
    """Red-team s32: all three were admitted; no mapping of the arguments called the problem
    once per item (decontamination.item_view) or parsed a text of numbers (parsed_view)."""
    start = body.rindex("def ") + 4
    name = body[start:body.index("(", start)]
    copy = proposal(body, calls(name, args))
    assert reason(sandbox, copy, (problem(problem_id),)) == f"validation_twin:{problem_id}"


CHANGE_BASE = ("def {name}(x: int{param}) -> str:\n{fixed}    ret = ''\n    while x > 0:\n"
               "        ret = str(x % base) + ret\n        x //= base\n    return ret\n")  # /44's
MODP = ("def {name}(n: int{param}) -> int:\n{fixed}    ret = 1\n    for i in range(n):\n"
        "        ret = (2 * ret) % p\n    return ret\n")  # HumanEval/49's


@pytest.mark.parametrize("body, args, problem_id", [
    (CHANGE_BASE.format(name="ternary", param="", fixed="    base = 3\n"),
     [(n,) for n in (8, 7, 100, 45, 19, 26, 81, 1000)], "HumanEval/44"),
    (MODP.format(name="pow2_mod", param="", fixed="    p = 101\n"),
     [(n,) for n in (3, 1101, 0, 100, 37, 64, 250, 7)], "HumanEval/49"),
    (CHANGE_BASE.format(name="bits_lsb", param="", fixed="    base = 2\n")
     .replace("return ret", "return ret[::-1]"),
     [(n,) for n in (8, 7, 100, 45, 19, 26, 81, 1000)], "HumanEval/44"),
    ("def area45(a: int) -> float:\n    b, c = 4, 5\n"
     "    if a + b <= c or a + c <= b or b + c <= a:\n        return -1\n"
     "    s = (a + b + c) / 2\n    return round((s * (s - a) * (s - b) * (s - c)) ** 0.5, 2)\n",
     [(a,) for a in (3, 2, 6, 8, 1, 5, 9, 4)], "HumanEval/71"),
    (MODP.format(name="pow2_mod", param="", fixed="    p = 101\n").replace(
        "return ret", "return ret + 1"),
     [(n,) for n in (3, 1101, 0, 100, 37, 64, 250, 7)], "HumanEval/49"),
], ids=["base_3", "mod_101", "backwards", "two_constants", "affine"])
def test_a_validation_problem_with_a_parameter_fixed_to_its_tests_constant_is_a_twin(
        sandbox, body, args, problem_id):
    """Red-team s33 and s34: each was admitted (twin_rules' PARTIAL): a constant the test
    passes, the answer backwards, two constants one call of the test passes together, the
    answer plus one."""
    start = body.rindex("def ") + 4  # the entry point: the last function
    copy = proposal(body, calls(body[start:body.index("(", start)], args))
    assert reason(sandbox, copy, (problem(problem_id),)) == f"validation_twin:{problem_id}"


def test_a_task_agreeing_with_a_partial_problem_in_few_outputs_is_no_twin(sandbox):
    """Filled in with its test's 2 or 4, is_simple_power(n, k) (HumanEval/76) is an honest
    'is n a power of two' or 'of four', in two values: a partial item is a twin by agreement
    alone, in MIN_DISTINCT outputs or more (twin_rules' PARTIAL)."""
    for name, base in (("is_power_of_two", 2), ("is_power_of_four", 4)):
        task = proposal(f"def {name}(n: int) -> bool:\n    k = 1\n    while k < n:\n"
                        f"        k *= {base}\n    return k == n\n",
                        calls(name, [(n,) for n in (1, 2, 3, 16, 18, 64, 100, 256)]))
        assert reason(sandbox, task, (problem("HumanEval/76"),)) == ""


def test_a_task_linear_in_its_number_is_no_affine_twin_of_a_filled_problem(sandbox):
    """Filled with a test string, HumanEval/67's fruit_distribution(s, n) is n minus a
    constant, and any task linear in n was its affine twin (s33's probe): under PARTIAL the
    affine rule needs expected outputs affine in no argument alone."""
    task = proposal("def seats_left(n: int) -> int:\n    taken = 0\n    for row in range(3):\n"
                    "        taken += 4\n    return 3 * n - taken\n",
                    calls("seats_left", [(n,) for n in (10, 25, 7, 40, 13, 99, 5, 60)]))
    assert reason(sandbox, task, (problem("HumanEval/67"),)) == ""


@pytest.mark.parametrize("body, args, problem_id", [
    ("def bump_scores(scores: list) -> list:\n    return [max(s, 5) for s in scores]\n",
     [([3, 7, 9],), ([],), ([1, 2, 10],), ([6, 8, 4, 12],), ([0, 15],), ([20, 30, 2],)],
     "HumanEval/137"),
    ("def clip_negatives(nums: list) -> list:\n    return [n if n > 0 else 0 for n in nums]\n",
     [([1, -2, 3],), ([-5, -1],), ([],), ([4, 0, -7, 9],), ([10, 20, -30],), ([6, -6, 8, 2],)],
     "HumanEval/137"),
    ("def reversed_strings(nums: list) -> list:\n    return [str(n)[::-1] for n in nums]\n",
     [([12, 345, 6],), ([],), ([100, 21],), ([9876, 55, 13],), ([70, 81, 92, 43],)],
     "HumanEval/44"),
    ("def vowel_only_words(s: str) -> list:\n"
     "    return [w for w in s.split() if all(c.lower() in 'aeiou' for c in w)]\n",
     [("a cat ate",), ("",), ("I owe you",), ("e i o u",), ("ai oe ue ia",), ("aa bb ee ii",)],
     "HumanEval/117"),
    ("def sort_csv(text: str) -> list:\n    if not text:\n        return []\n"
     "    return sorted(int(x) for x in text.split(','))\n",
     [("30,4,4,100",), ("",), ("19,91,19",), ("-5,64,0,64,13",), ("7",), ("29,38,47,29,65",),
      ("12,21,12,3",)], "HumanEval/120"),
], ids=["pass_mark", "relu_list", "reversed_digits", "vowel_words", "sorted_text"])
def test_an_everyday_operation_a_filled_problem_computes_is_no_twin(sandbox, body, args,
                                                                     problem_id):
    """s34's probe: with the ints 0 to 10 filled in and items on the views, each honest task
    was a twin: compare_one(x, 5) is max(x, 5) item by item, change_base(x, 10) backwards
    reverses digits, select_words(s, 0) keeps the all-vowel words, maximum(xs, k) sorts a short
    list (twin_rules' PARTIAL)."""
    task = proposal(body, calls(body[4:body.index("(")], args))
    assert reason(sandbox, task, (problem(problem_id),)) == ""
