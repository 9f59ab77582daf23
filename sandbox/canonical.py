"""Plain data as text, for the values that cross between a candidate and its grader.

Standard library only: the jail's harness and the host both use this one file, so both sides
agree byte for byte (the host loads it from here; the jail gets a copy next to harness.py).

The encoding is a flat JSON array of strings, one token per value or container header, in
prefix order: "N" None, "T"/"F" bools, "i<hex>" int (hex: no digit limit, unlike decimal),
"f<float.hex()>" float, "s<text>" str,
"b<hex>" bytes, and "L<n>" list, "U<n>" tuple, "S<n>" set, "Z<n>" frozenset, "D<n>" dict (n
key/value pairs) followed by their items. Flat, so that `json.loads` never recurses on input it
did not write; both directions walk an explicit stack, so no input depth can reach Python's
recursion limit.

Only those exact types cross: a subclass (an int that equals anything), an object with its own
`__eq__`, a generator or a numpy scalar is `NotPlainData`, which the grader scores as a wrong
answer. Except Python's own containers that `==` takes for the type they extend: a Counter, an
OrderedDict or a defaultdict crosses as the dict of its items, a namedtuple as the tuple of its
fields (`as_plain`). Only their items cross, so nothing of their class reaches a comparison; a
correct HumanEval/111 that returned a Counter passed HumanEval's own harness and failed ours
(red-team s33). A deque, a range, a Fraction stay wrong: `==` does not take them for a list
or a number.

`same()` is the grader's comparison: types must match exactly (True is not 1, 1 is not 1.0,
and so in set items and dict keys too), floats compare exactly unless a tolerance is given
(then `math.isclose` with it as both the relative and the absolute tolerance; not for floats
inside set items or dict keys, which are exact), NaN equals NaN, and -0.0 equals 0.0.

Sets and dicts compare a new item with every item already in them that shares its hash value,
and ints, floats and tuples hash predictably (every k * (2**61 - 1) hashes to 0): items built
to share one make building or comparing n of them quadratic. A set of 30,000 such ints cost
the grader 10 s of CPU, until its own CPU limit killed it (red-team pass 18). So `decode`
refuses, and `same` answers False for, a value whose sets and dicts would cost more than
MAX_COLLISIONS such comparisons in all (`_Collisions`).
"""

import collections
import json
import json.encoder
import math

MAX_DEPTH = 64
MAX_TOKENS = 1_000_000
MAX_TEXT_BYTES = 16 * 1024 * 1024
# Honest data shares hash values by coincidence only: -1 and -2 do, and so do all 2**k k-tuples
# of them (the 8 triples cost 28 comparisons). 100,000 comparisons (447 colliding ints) cost
# 1.3 ms to build a set here and 12 ms in `same`; the 16 MB a decode takes could hold 700,000
# colliding items (2.4e11 comparisons).
MAX_COLLISIONS = 100_000

_CONTAINERS = {list: "L", tuple: "U", set: "S", frozenset: "Z", dict: "D"}
_AS_DICT = frozenset({collections.Counter, collections.OrderedDict, collections.defaultdict})
_BUILDERS = {"L": list, "U": tuple, "S": set, "Z": frozenset, "D": dict}
_HEX = frozenset("0123456789abcdef")
# A token as json.dumps(ensure_ascii=True) writes a string. Joining these is json.dumps of the
# token list with compact separators, byte for byte, without building a JSONEncoder per call
# (5.6 us of a call's 17 us of encoding, measured on a HumanEval call).
_JSON_STRING = json.encoder.encode_basestring_ascii


class NotPlainData(ValueError):
    """The value (or the text) is not plain data within the caps; the message says why."""


def encode(value) -> str:
    """The canonical text of `value`. Raises NotPlainData (naming the offending type)."""
    tokens = []
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if len(tokens) >= MAX_TOKENS:
            raise NotPlainData(f"more than {MAX_TOKENS} values")
        kind = type(item)
        if item is None:
            tokens.append("N")
        elif kind is bool:
            tokens.append("T" if item else "F")
        elif kind is int:
            tokens.append(f"i{item:x}")
        elif kind is float:
            tokens.append(f"f{item.hex()}")
        elif kind is str:
            tokens.append(f"s{item}")
        elif kind is bytes:
            tokens.append(f"b{item.hex()}")
        elif kind in _CONTAINERS:
            if depth >= MAX_DEPTH:
                raise NotPlainData(f"nested deeper than {MAX_DEPTH}")
            tokens.append(f"{_CONTAINERS[kind]}{len(item)}")
            children = [x for pair in item.items() for x in pair] if kind is dict else list(item)
            stack.extend((child, depth + 1) for child in reversed(children))
        elif (plain := as_plain(item)) is not None:
            stack.append((plain, depth))
        else:
            raise NotPlainData(f"a {type_name(item)} is not plain data")
    text = "[" + ",".join(map(_JSON_STRING, tokens)) + "]"
    if len(text) > MAX_TEXT_BYTES:
        raise NotPlainData(f"{len(text)} bytes encoded, over {MAX_TEXT_BYTES}")
    return text


def as_plain(value):
    """The dict of a Counter, OrderedDict or defaultdict, the tuple of a namedtuple's fields
    (a tuple class with `_fields`: collections.namedtuple's and typing.NamedTuple's); None for
    anything else."""
    kind = type(value)
    if kind in _AS_DICT:
        return dict(value)
    if issubclass(kind, tuple) and type(getattr(kind, "_fields", None)) is tuple:
        return tuple(value)
    return None


def decode(text):
    """The value `text` encodes. Raises NotPlainData for anything malformed or over the caps."""
    if not isinstance(text, (str, bytes, bytearray)) or len(text) > MAX_TEXT_BYTES:
        raise NotPlainData("not text, or over the size cap")
    try:
        tokens = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise NotPlainData(f"not canonical text: {type(e).__name__}") from None
    if not isinstance(tokens, list) or not tokens or len(tokens) > MAX_TOKENS:
        raise NotPlainData("not a token list of the allowed size")
    collisions = _Collisions()
    # Each open container: [tag, items still expected, items so far].
    open_items = []
    result = _NOTHING = object()
    for token in tokens:
        if result is not _NOTHING:
            raise NotPlainData("tokens after the end of the value")
        if not isinstance(token, str) or not token:
            raise NotPlainData("a token is not a non-empty string")
        tag, body = token[0], token[1:]
        if tag in _BUILDERS:
            count = _count(body)
            if len(open_items) >= MAX_DEPTH:
                raise NotPlainData(f"nested deeper than {MAX_DEPTH}")
            open_items.append([tag, count * 2 if tag == "D" else count, []])
            value = _NOTHING
        else:
            value = _scalar(tag, body)
        while open_items and (value is not _NOTHING or open_items[-1][1] == 0):
            if value is not _NOTHING:
                open_items[-1][2].append(value)
                open_items[-1][1] -= 1
                value = _NOTHING
            if open_items[-1][1] == 0:
                tag, _, items = open_items.pop()
                value = _build(tag, items, collisions)
        if not open_items and value is not _NOTHING:
            result = value
    if result is _NOTHING:
        raise NotPlainData("the text ends inside a container")
    return result


def same(a, b, tolerance: float = 0.0) -> bool:
    """Exact-type structural equality of two decoded values (see the module docstring)."""
    sides = None  # each side's _Collisions, made at the first set or dict (a scalar's 0.3 us
    # call took 1 us when made up front)
    stack = [(a, b)]
    try:
        while stack:
            x, y = stack.pop()
            if type(x) is not type(y):
                return False
            if type(x) is float:
                if not _same_float(x, y, tolerance):
                    return False
            elif type(x) in (list, tuple):
                if len(x) != len(y):
                    return False
                stack.extend(zip(x, y))
            elif type(x) is dict:
                # Typed keys: 1 and True are one key to Python but different data. Two NaN
                # keys are two keys under one typed key: their values pair up in order.
                sides = sides or (_Collisions(), _Collisions())
                xs, ys = _by_typed_key(x, sides[0]), _by_typed_key(y, sides[1])
                if xs.keys() != ys.keys() or any(len(xs[k]) != len(ys[k]) for k in xs):
                    return False
                stack.extend(pair for k in xs for pair in zip(xs[k], ys[k]))
            elif type(x) in (set, frozenset):
                # Counted: two NaN objects are two items under one typed key ({nan} has one).
                sides = sides or (_Collisions(), _Collisions())
                if _typed_counts(x, sides[0]) != _typed_counts(y, sides[1]):
                    return False
            elif x != y:  # None, bool, int, str, bytes
                return False
    except NotPlainData:  # a hash flood on either side: `decode` refuses it, as data it is not
        return False
    return True


class _Collisions:
    """What one call's sets and dicts have cost in comparisons of items sharing a hash value."""

    def __init__(self):
        self.left = MAX_COLLISIONS

    def count(self, keys):
        """Charge the comparisons that putting `keys` into one set or dict would make among
        items sharing a hash value (each key: one per earlier key with its hash, equal or not,
        which bounds them), each at the key's size (`_size`: a long tuple compares item by
        item), before they are made. Raises NotPlainData past the cap, and TypeError for an
        unhashable key. Hash values are ints that hash to themselves and never collide, so
        this count costs one dict insertion per key."""
        if len(keys) < 2:
            return
        seen = {}
        for key in keys:
            h = hash(key)
            earlier = seen.get(h, 0)
            if earlier:
                self.left -= earlier * _size(key)
                if self.left < 0:
                    raise NotPlainData(f"sets or dicts whose items share hash values: over "
                                       f"{MAX_COLLISIONS} comparisons (a hash flood)")
            seen[h] = earlier + 1


def _size(value):
    """What comparing `value` with an equal-hashed item can cost, in items: a tuple's or a
    frozenset's items (red-team s31, pass 20: 447 colliding tuples sharing a prefix of 2,200
    items stayed under the cap by count and cost 2.2e8 item comparisons), an int's or a str's
    length in blocks; the types `same` spells out in its keys count nothing, so a key costs
    there what it does in `decode`. Only a key that collides is measured: once, in linear
    time."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is tuple or kind is frozenset:
            stack.extend(item)
        elif kind is int:
            total += 1 + (item.bit_length() >> 12)
        elif kind is str or kind is bytes:
            total += 1 + (len(item) >> 9)
        elif kind is not type:
            total += 1
    return max(total, 1)


def _typed(value, collisions):
    """A hashable item (a set's, or a dict key) with every type spelt out, for exact-type
    comparison of sets: `{True, 2.0} == {1, 2}` in Python, but not as data. Floats compare
    exactly here, whatever the tolerance (NaN equals NaN, -0.0 equals 0.0). Recursive, but only
    as deep as the value's tuples and frozensets: `decode` caps that at MAX_DEPTH."""
    kind = type(value)
    if kind is float and math.isnan(value):
        return (float, "nan")
    if kind is tuple:
        return (tuple, tuple(_typed(v, collisions) for v in value))
    if kind is frozenset:
        counted = list(_typed_counts(value, collisions).items())
        collisions.count(counted)
        return (frozenset, frozenset(counted))
    return (kind, value)


def _typed_counts(items, collisions):
    keys = [_typed(item, collisions) for item in items]
    collisions.count(keys)
    counts = {}
    for key in keys:
        counts[key] = counts.get(key, 0) + 1
    return counts


def _by_typed_key(mapping, collisions):
    keys = [_typed(key, collisions) for key in mapping]
    collisions.count(keys)
    grouped = {}
    for key, value in zip(keys, mapping.values()):
        grouped.setdefault(key, []).append(value)
    return grouped


def _same_float(x: float, y: float, tolerance: float) -> bool:
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    if x == y:
        return True
    return tolerance > 0 and math.isclose(x, y, rel_tol=tolerance, abs_tol=tolerance)


def _count(body: str) -> int:
    if not (body.isascii() and body.isdigit()) or len(body) > 7:  # "²" is a digit to isdigit
        raise NotPlainData(f"bad container size {body[:20]!r}")
    return int(body)


def _scalar(tag: str, body: str):
    try:
        if tag == "N" and not body:
            return None
        if tag in "TF" and not body:
            return tag == "T"
        if tag == "i" and body and _HEX.issuperset(body.removeprefix("-")):
            return int(body, 16)
        if tag == "f":
            return float.fromhex(body)
        if tag == "s":
            return body
        if tag == "b":
            return bytes.fromhex(body)
    except ValueError as e:  # malformed hex
        raise NotPlainData(f"bad {tag!r} token: {e}") from None
    raise NotPlainData(f"unknown token {(tag + body)[:20]!r}")


def _build(tag: str, items: list, collisions: _Collisions):
    try:
        if tag == "D":
            keys = items[::2]
            collisions.count(keys)
            return dict(zip(keys, items[1::2]))
        if tag in "SZ":
            collisions.count(items)
        return _BUILDERS[tag](items)
    except TypeError as e:  # an unhashable set item or dict key
        raise NotPlainData(f"bad {tag!r} container: {e}") from None


def type_name(value) -> str:
    kind = type(value)
    module = getattr(kind, "__module__", "")
    name = getattr(kind, "__qualname__", "?")
    return name if module == "builtins" else f"{module}.{name}"
