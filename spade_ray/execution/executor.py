"""`Executor`: the one interface the loop runs programs through, and where it runs them.

Two implementations with the same public methods: the in-process `Sandbox` (its workers are
processes of the calling one) and the Ray `SandboxPool` (sandbox actors spread over the
cluster's nodes, each job retried once on another actor when its actor dies). `Placement`
names the choice the sandbox config makes (conf/sandbox/*.yaml `placement`).
Non-goal: choosing a backend (local bwrap or Docker); both placements take it as an argument.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Protocol

from spade_ray.records import CheckResult, ExecResult, Limits, TestSuite


class Placement(enum.StrEnum):
    """Where sandbox workers run."""

    DRIVER = "driver"  # an in-process Sandbox: worker processes on the driver's node
    POOL = "pool"  # a SandboxPool: Ray actors, wherever the cluster has CPUs


class Executor(Protocol):
    """Runs untrusted programs and checks them against tests; results come back in the order
    given. `limits` None: the executor's own."""

    def run(self, code: str | bytes, stdin: str | bytes | None = None,
            limits: Limits | None = None) -> ExecResult: ...

    def run_many(self, codes: Sequence[str | bytes],
                 stdins: Sequence[str | bytes | None] | None = None,
                 limits: Limits | None = None) -> list[ExecResult]: ...

    def check(self, code: str | bytes, tests: TestSuite,
              limits: Limits | None = None) -> CheckResult: ...

    def check_many(self, codes: Sequence[str | bytes], tests: Sequence[TestSuite],
                   limits: Limits | None = None) -> list[CheckResult]: ...

    def close(self) -> None: ...

    def __enter__(self) -> Executor: ...

    def __exit__(self, *exc: object) -> None: ...
