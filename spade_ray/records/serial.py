"""The one serialisation path of every record (trace store, Ray, CLI `--json`): `to_dict` /
`from_dict`, so that a record read back equals the record written."""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from typing import Any, TypeVar

R = TypeVar("R")


def to_dict(record: Any) -> dict[str, Any]:
    """A record as plain JSON-able data (enums as their values, tuples as lists)."""
    return json.loads(json.dumps(dataclasses.asdict(record), default=_enum_value))


def _enum_value(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    raise TypeError(f"cannot serialise {type(value).__name__}")


def from_dict(cls: type[R], data: dict[str, Any]) -> R:
    """Rebuild a record from `to_dict` output; unknown or missing fields are errors."""
    if not isinstance(data, dict):
        raise TypeError(f"{cls.__name__} needs a JSON object, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"unknown fields for {cls.__name__}: {sorted(unknown)}")
    kwargs = {name: _convert(hints[name], value) for name, value in data.items()}
    return cls(**kwargs)


def _convert(hint: Any, value: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):  # X | None: X's conversion, or None
        if value is None:
            return None
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        return _convert(inner[0], value) if len(inner) == 1 else value
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return from_dict(hint, value)
    if origin is tuple and value is not None:
        (item_hint, _ellipsis) = typing.get_args(hint)
        return tuple(_convert(item_hint, v) for v in value)
    return value
