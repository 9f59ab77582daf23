"""A round's caps and what it has used of them: the loop stops new work once any is reached."""

from __future__ import annotations

import time

from spade_ray.config import CapsConfig
from spade_ray.recorder import RoundRecord
from spade_ray.rollout.sampling import TokenMeter


class Budget:
    """A round's caps (config.CapsConfig) and what it has used of them."""

    def __init__(self, caps: CapsConfig) -> None:
        self.caps, self.started = caps, time.monotonic()
        self.generator = TokenMeter("generator", caps.tokens_generator)
        self.solver = TokenMeter("solver", caps.tokens_solver)
        self.meters = {"generator": self.generator, "solver": self.solver}

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def wall_left(self) -> bool:
        return self.caps.wall_s is None or self.elapsed_s() <= self.caps.wall_s

    def exhausted(self, record: RoundRecord) -> bool:
        """True (and recorded) once any cap is reached: no new work this round."""
        caps, reasons = self.caps, []
        if not self.wall_left():
            reasons.append(f"wall {self.elapsed_s():.0f} s > {caps.wall_s} s")
        if caps.sandbox_cpu_s is not None and record.sandbox_cpu_s >= caps.sandbox_cpu_s:
            reasons.append(f"sandbox {record.sandbox_cpu_s:.0f} cpu-s")
        if caps.tasks is not None and len(record.new_tasks) >= caps.tasks:
            reasons.append(f"{len(record.new_tasks)} valid tasks")
        reasons += [f"{m.role} tokens {m.total}" for m in self.meters.values()
                    if m.cap is not None and m.total >= m.cap]
        if reasons:
            record.cap_reached(", ".join(reasons))
        return bool(reasons)
