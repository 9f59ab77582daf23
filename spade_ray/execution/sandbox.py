"""`Sandbox`: the Python API over N warm workers of one backend (local bwrap or Docker).

`run` / `check` take one program; `run_many` / `check_many` run in parallel over the workers and
return results in the order given. Each worker is used by one thread at a time (a queue hands
them out); the workers' own processes do the work, so threads only wait on pipes.
Input is validated before anything runs: a bad program is an error naming it, never a result.
"""

from __future__ import annotations

import dataclasses
import os
import queue
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from spade_ray.execution.checking import to_check_result
from spade_ray.execution.local import LocalWorker
from spade_ray.execution.protocol import BackendUnavailable
from spade_ray.records import CheckResult, ExecResult, ExecStatus, Limits, TestSuite

BACKENDS = ("local", "docker")
MAX_CODE_BYTES = 1_000_000
MAX_STDIN_BYTES = 16_000_000


class SandboxInputError(ValueError):
    """The program or its stdin cannot be run as given (the message says which and why)."""


def make_worker(backend: str, limits: Limits, packages: tuple[str, ...], max_runs: int):
    if backend == "local":
        return LocalWorker(limits, packages, max_runs)
    if backend == "docker":
        from spade_ray.execution.docker_backend import DockerWorker

        return DockerWorker(limits, packages, max_runs)
    raise ValueError(f"unknown sandbox backend {backend!r}: choose one of {', '.join(BACKENDS)}")


class Sandbox:
    """Run untrusted programs in isolation. Use as a context manager, or call close()."""

    def __init__(self, backend: str = "local", limits: Limits | None = None,
                 workers: int | None = None, packages: Sequence[str] = (),
                 max_runs_per_worker: int = 1000) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown sandbox backend {backend!r}: choose one of "
                             f"{', '.join(BACKENDS)}")
        self.backend = backend
        self.limits = limits or Limits()
        count = workers or os.cpu_count() or 1
        if count < 1:
            raise ValueError(f"workers must be at least 1, got {count}")
        self._all = []
        try:
            for _ in range(count):
                self._all.append(make_worker(backend, self.limits, tuple(packages),
                                             max_runs_per_worker))
        except BackendUnavailable:
            self.close()
            raise
        self._free: queue.Queue = queue.Queue()
        for worker in self._all:
            self._free.put(worker)
        self._threads = ThreadPoolExecutor(max_workers=count)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if getattr(self, "_threads", None) is not None:
            self._threads.shutdown(wait=True)
        for worker in self._all:
            worker.close()
        self._all = []

    # ------------------------------------------------------------------ the API

    def run(self, code: str | bytes, stdin: str | bytes | None = None,
            limits: Limits | None = None) -> ExecResult:
        code_text, stdin_bytes = validate_program(code, stdin)
        return self._on_a_worker(code_text, stdin_bytes, limits or self.limits, None)[0]

    def run_many(self, codes: Sequence[str | bytes],
                 stdins: Sequence[str | bytes | None] | None = None,
                 limits: Limits | None = None) -> list[ExecResult]:
        jobs = validate_programs(codes, stdins)
        lim = limits or self.limits
        futures = [self._threads.submit(self._on_a_worker, c, s, lim, None) for c, s in jobs]
        return [f.result()[0] for f in futures]

    def check(self, code: str | bytes, tests: TestSuite,
              limits: Limits | None = None) -> CheckResult:
        code_text, _ = validate_program(code, None)
        return to_check_result(tests, *self._on_a_worker(code_text, None,
                                                         limits or self.limits, tests))

    def check_many(self, codes: Sequence[str | bytes], tests: Sequence[TestSuite],
                   limits: Limits | None = None) -> list[CheckResult]:
        if len(codes) != len(tests):
            raise SandboxInputError(f"check_many got {len(codes)} programs but {len(tests)} "
                                    "test suites")
        jobs = validate_programs(codes, None)
        lim = limits or self.limits
        futures = [self._threads.submit(self._on_a_worker, c, None, lim, t)
                   for (c, _), t in zip(jobs, tests)]
        return [to_check_result(t, *f.result()) for t, f in zip(tests, futures)]

    def _on_a_worker(self, code, stdin, limits, tests):
        """Run on a free worker. A `sandbox_error` (the infrastructure failed, never the code)
        is run once more: the worker has dropped its jail or container, so the second run gets
        a fresh one; the result says so in `attempts`, and a second failure is returned as is."""
        if not self._all:
            raise RuntimeError("this Sandbox is closed")
        worker = self._free.get()
        try:
            result, report = worker.run(code, stdin, limits, tests)
            if result.status is ExecStatus.SANDBOX_ERROR:
                result, report = worker.run(code, stdin, limits, tests)
                result = dataclasses.replace(result, attempts=2)
            return result, report
        finally:
            self._free.put(worker)


def validate_program(code: str | bytes, stdin: str | bytes | None, where: str = "code"
              ) -> tuple[str, bytes | None]:
    if isinstance(code, bytes):
        try:
            code = code.decode("utf-8")
        except UnicodeDecodeError as e:
            raise SandboxInputError(f"{where} is not valid UTF-8 (byte {e.start})") from e
    if not isinstance(code, str):
        raise SandboxInputError(f"{where} must be str or bytes, got {type(code).__name__}")
    if not code.strip():
        raise SandboxInputError(f"{where} is empty")
    size = len(code.encode("utf-8", errors="surrogatepass"))
    if size > MAX_CODE_BYTES:
        raise SandboxInputError(f"{where} is {size} bytes, over the {MAX_CODE_BYTES}-byte limit")
    if "\x00" in code:
        raise SandboxInputError(f"{where} contains a NUL byte")
    if isinstance(stdin, str):
        stdin = stdin.encode("utf-8")
    if stdin is not None and not isinstance(stdin, bytes):
        raise SandboxInputError(f"stdin for {where} must be str, bytes or None")
    if stdin is not None and len(stdin) > MAX_STDIN_BYTES:
        raise SandboxInputError(f"stdin for {where} is {len(stdin)} bytes, over the "
                                f"{MAX_STDIN_BYTES}-byte limit")
    return code, stdin


def validate_programs(codes: Sequence[str | bytes],
                      stdins: Sequence[str | bytes | None] | None
                      ) -> list[tuple[str, bytes | None]]:
    """Validate a batch before any of it runs: one bad program fails the call, naming it."""
    stdins = list(stdins) if stdins is not None else [None] * len(codes)
    if len(stdins) != len(codes):
        raise SandboxInputError(f"got {len(codes)} programs but {len(stdins)} stdins")
    return [validate_program(c, s, where=f"code[{i}]")
            for i, (c, s) in enumerate(zip(codes, stdins))]
