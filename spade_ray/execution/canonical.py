"""The canonical data codec, loaded from the jail's own copy (sandbox/canonical.py).

Both sides of the grader must agree byte for byte on what a value's text is, so there is one
codec file; the jail gets it next to harness.py, and the host loads it from there rather than
keeping a second copy that could drift. `example` builds a task's I/O example from values.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from spade_ray.execution.protocol import CANONICAL
from spade_ray.records import IOExample

SOURCE = CANONICAL  # the codec's one file (what a cache of encoded data depends on)
_spec = importlib.util.spec_from_file_location("spade_ray_sandbox_canonical", CANONICAL)
_codec = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_codec)

NotPlainData = _codec.NotPlainData
encode = _codec.encode
decode = _codec.decode
same = _codec.same


def example(args: tuple[Any, ...], expected: Any) -> IOExample:
    """An I/O example: calling the entry point with `args` must return `expected`. Raises
    NotPlainData when either is not plain data."""
    if type(args) is not tuple:
        raise NotPlainData(f"example arguments must be a tuple, got {type(args).__name__}")
    return IOExample(args=encode(args), expected=encode(expected))
