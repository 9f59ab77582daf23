"""Progress within a round: how many generator outputs, solved tasks and executed candidates so
far. A round on CPU takes minutes, and the round line only comes at its end.

On a terminal: one tqdm bar per stage, removed when the round ends (the round line stays).
Anywhere else (a log file, `ray job logs`, CI): a plain line per step, which greps and tails
well and has no carriage returns. Non-goals: time estimates across rounds, progress of the
learner's update (the learner actor prints its own steps).
"""

from __future__ import annotations

import sys
from typing import TextIO

from tqdm import tqdm

STAGES = (("generated", "generator outputs"), ("solved", "tasks solved"),
          ("executed", "candidates executed"))


class Progress:
    """Counters of one round's stages; `totals` where known in advance (stage -> count)."""

    def __init__(self, round_index: int, totals: dict[str, int], stream: TextIO | None = None,
                 tty: bool | None = None) -> None:
        self.round, self.stream = round_index, stream or sys.stdout
        self.tty = self.stream.isatty() if tty is None else tty
        self.counts = {stage: 0 for stage, _ in STAGES}
        self.totals = totals
        self.bars = {stage: tqdm(total=totals.get(stage), desc=f"round {round_index} {label}",
                                 file=self.stream, leave=False, position=i, dynamic_ncols=True,
                                 mininterval=0)  # a few updates a round: show each
                     for i, (stage, label) in enumerate(STAGES)} if self.tty else {}

    def advance(self, **steps: int) -> None:
        """Count `steps` (stage=number) and show them."""
        for stage, n in steps.items():
            self.counts[stage] += n
            if stage in self.bars:
                self.bars[stage].update(n)
        if not self.tty:
            print(f"round {self.round}: " + ", ".join(self._count(s, label)
                                                      for s, label in STAGES),
                  file=self.stream, flush=True)

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()
        self.bars = {}

    def _count(self, stage: str, label: str) -> str:
        total = self.totals.get(stage)
        return f"{self.counts[stage]}{'' if total is None else f'/{total}'} {label}"
