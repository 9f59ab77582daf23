"""Tracking: the trace store (every item of every round), metrics, W&B, plots, queries, the
progress of a round.

`metrics` imports wandb and matplotlib lazily, so importing this package stays cheap.
"""

from spade_ray.tracking.metrics import MetricsSink, summary_table
from spade_ray.tracking.progress import Progress
from spade_ray.tracking.schema import GeneratorInput, TracedTask, Versions
from spade_ray.tracking.trace import TraceStore

__all__ = ["GeneratorInput", "MetricsSink", "Progress", "TraceStore", "TracedTask", "Versions",
           "summary_table"]
