"""Preferences: pairs (and GRPO groups) from scored candidates (pairs.py) and their export
(export.py): crash-safe JSONL per round and a `datasets` Dataset in TRL's
prompt/chosen/rejected format."""

from spade_ray.preferences.export import (
    TRL_COLUMNS,
    append_jsonl,
    read_jsonl,
    save_dataset,
    to_dataset,
)
from spade_ray.preferences.pairs import build_groups, build_pairs

__all__ = ["TRL_COLUMNS", "append_jsonl", "build_groups", "build_pairs", "read_jsonl",
           "save_dataset", "to_dataset"]
