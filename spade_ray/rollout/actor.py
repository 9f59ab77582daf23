"""`ModelActor`: one model backend in a Ray actor; `RoleEngines`: a role's actors as one engine.

Requests to a role are split over its engines (data-parallel generation). An engine that dies is
restarted by Ray (max_restarts=-1); the call that was running on it is not retried (generation is
not idempotent once tokens are counted): `RoleEngines.generate` returns the indices of the
prompts that were lost so the loop can re-issue them; a restarted engine loads the role's
latest weights before its next request. An engine whose call failed is left out of requests
until a probe answers: Ray fails a call to a restarting actor at once (Ray 2.60, measured in
tests/test_multinode.py), so a re-issue sharded over it would lose those prompts again for as
long as its restart takes (its bundle moved to another node, the model loaded). With every
engine down, a request waits up to ENGINE_WAIT_S for one to come back.
A backend whose engine died inside a live actor (vLLM's
engine-core process) would fail or hang every request from then on, so the actor exits, for Ray
to restart it, when a call raises EngineDead or when the backend's `alive()` (polled by a
watchdog thread, for backends that have one) turns False.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import ray
from ray.exceptions import ActorUnavailableError, RayActorError

from spade_ray.records import Completion, SamplingParams
from spade_ray.rollout.backend import (
    BACKENDS,
    EngineDead,
    ModelBackend,
    RolloutError,
    generate_fitting,
)


def make_backend(backend: str, model: str, **kwargs: Any) -> ModelBackend:
    """Build a backend by name. `model` is a resolve_model() spec (hf, vllm) or the API's model
    name (openai, which also needs base_url)."""
    if backend == "hf":
        from spade_ray.rollout.hf_backend import HFBackend
        from spade_ray.rollout.models import resolve_model

        return HFBackend(resolve_model(model), **kwargs)
    if backend == "vllm":
        from spade_ray.rollout.models import resolve_model
        from spade_ray.rollout.vllm_backend import VLLMBackend

        return VLLMBackend(resolve_model(model), **kwargs)
    if backend == "openai":
        from spade_ray.rollout.openai_backend import OpenAIBackend

        return OpenAIBackend(model=model, **kwargs)
    raise ValueError(f"unknown model backend {backend!r}: choose one of {', '.join(BACKENDS)}")


WATCH_INTERVAL_S = 1.0  # how often the watchdog asks a backend whether its engine is alive
PROBE_INTERVAL_S = 0.5  # how often a request with every engine down asks whether one is back
ENGINE_WAIT_S = 600.0  # then it is sent to all anyway, and its prompts come back `lost`


@ray.remote(max_restarts=-1, max_task_retries=0)
class ModelActor:
    def __init__(self, backend: str, model: str, backend_kwargs: dict[str, Any]) -> None:
        self.backend = make_backend(backend, model, **backend_kwargs)
        if hasattr(self.backend, "alive"):
            threading.Thread(target=self._watch, daemon=True, name="engine-watchdog").start()

    def _watch(self) -> None:
        while self.backend.alive():
            time.sleep(WATCH_INTERVAL_S)
        _exit_for_restart("the engine died")

    def generate(self, prompts: list[str], sampling: SamplingParams,
                 latest: tuple[list[ray.ObjectRef], int] | None = None
                 ) -> list[list[Completion]]:
        """`latest`: the role's current weights ([ref], version). An engine that Ray restarted
        came back with its initial weights; it catches up before generating. (The ref is
        wrapped in a list so Ray passes the reference instead of fetching it every call.)"""
        with _exit_if_dead():
            if latest is not None and self.backend.weights_version != latest[1]:
                self.backend.update_weights(ray.get(latest[0][0]), latest[1])
            return generate_fitting(self.backend, prompts, sampling)

    def update_weights(self, state_dict: Mapping[str, Any], version: int) -> int:
        with _exit_if_dead():
            self.backend.update_weights(state_dict, version)
        return self.backend.weights_version

    def weights_version(self) -> int:
        return self.backend.weights_version

    def pid(self) -> int:
        return os.getpid()


@contextlib.contextmanager
def _exit_if_dead() -> Iterator[None]:
    """Exit the actor's process on EngineDead: an unexpected exit is what Ray restarts
    (ray.actor.exit_actor() is a deliberate exit, which it would not)."""
    try:
        yield
    except EngineDead as e:
        _exit_for_restart(str(e))


def _exit_for_restart(reason: str) -> None:
    print(f"ModelActor {os.getpid()}: {reason}; exiting so that Ray restarts the engine",
          file=sys.stderr, flush=True)
    os._exit(1)


@dataclasses.dataclass(frozen=True)
class GenerationResult:
    """Completions in prompt order; None where the prompt was lost with a dead engine."""

    completions: list[list[Completion] | None]
    lost: tuple[int, ...]


class RoleEngines:
    """The engines (actors) serving one role, used as one."""

    def __init__(self, role: str, actors: Sequence[ray.actor.ActorHandle]) -> None:
        if not actors:
            raise ValueError(f"role {role!r} needs at least one engine")
        self.role = role
        self.actors = list(actors)
        self._weights: tuple[ray.ObjectRef, int] | None = None  # latest (state dict, version)
        self._probes: dict[int, ray.ObjectRef] = {}  # engine whose call failed -> its probe
        self._busy = BusyClock()

    @property
    def weights_version(self) -> int:
        return self._weights[1] if self._weights else 0

    @property
    def busy_s(self) -> float:
        """Seconds so far with a generate call in flight (from any thread)."""
        return self._busy.seconds()

    def generate(self, prompts: Sequence[str], sampling: SamplingParams) -> GenerationResult:
        """Shard prompts over the engines; a shard whose engine died comes back in `lost`."""
        with self._busy:
            return self._generate(prompts, sampling)

    def _generate(self, prompts: Sequence[str], sampling: SamplingParams) -> GenerationResult:
        latest = ([self._weights[0]], self._weights[1]) if self._weights else None
        up = self._up()
        shards = [(i, s) for i, s in zip(up, _shards(len(prompts), len(up))) if s]
        refs = [self.actors[i].generate.remote([prompts[j] for j in shard], sampling, latest)
                for i, shard in shards]
        completions: list[list[Completion] | None] = [None] * len(prompts)
        lost: list[int] = []
        for (i, shard), result in zip(shards, _gather(refs)):
            if isinstance(result, Exception):
                lost += shard
                self._probes[i] = self.actors[i].weights_version.remote()
            else:
                for j, group in zip(shard, result):
                    completions[j] = group
        return GenerationResult(completions, tuple(lost))

    def _up(self) -> list[int]:
        """The engines a request goes to: all but those whose probe has not answered (a failed
        probe is sent again). None up: wait for one, up to ENGINE_WAIT_S, then all of them."""
        deadline = time.monotonic() + ENGINE_WAIT_S
        while True:
            answered = dict(zip(self._probes, _gather(list(self._probes.values()), timeout=0)))
            for i, reply in answered.items():
                if isinstance(reply, Exception):  # still restarting: ask again
                    self._probes[i] = self.actors[i].weights_version.remote()
                elif reply is not _PENDING:
                    del self._probes[i]
            up = [i for i in range(len(self.actors)) if i not in self._probes]
            if up or time.monotonic() > deadline:
                return up or list(range(len(self.actors)))
            time.sleep(PROBE_INTERVAL_S)

    def update_weights(self, state_dict: Mapping[str, Any] | ray.ObjectRef, version: int) -> None:
        """Send new weights to every engine (one object-store copy, read by all). An engine that
        died meanwhile is restarted by Ray and loads them before its next request."""
        ref = state_dict if isinstance(state_dict, ray.ObjectRef) else ray.put(state_dict)
        replies = _gather([a.update_weights.remote(ref, version) for a in self.actors])
        versions = [v for v in replies if not isinstance(v, Exception)]
        if set(versions) - {version}:
            raise RolloutError(f"{self.role}: engines report versions {versions} after an "
                               f"update to {version}")
        self._weights = (ref, version)


class BusyClock:
    """Seconds during which at least one call was in flight. Calls from several threads (the
    round's generator and solver share an engine in cpu_gemma) overlap: an engine working on one
    request while another waits for it is busy once, not twice."""

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self._now, self._lock = now, threading.Lock()
        self._in_flight, self._since, self._total = 0, 0.0, 0.0

    def __enter__(self) -> None:
        with self._lock:
            if self._in_flight == 0:
                self._since = self._now()
            self._in_flight += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._total += self._now() - self._since

    def seconds(self) -> float:
        with self._lock:
            return self._total + (self._now() - self._since if self._in_flight else 0.0)


_PENDING = object()  # _gather's answer for a ref not done within its timeout


def _gather(refs: list[ray.ObjectRef], timeout: float | None = None) -> list[Any]:
    """Every result, or the actor error in its place (an engine died or is restarting); with a
    timeout, _PENDING for those not done by then."""
    done = set(ray.wait(refs, num_returns=len(refs), timeout=timeout, fetch_local=False)[0]
               if refs else ())
    out: list[Any] = []
    for ref in refs:  # those done: these gets do not block one after another
        try:
            out.append(ray.get(ref) if ref in done else _PENDING)
        except (RayActorError, ActorUnavailableError) as e:
            out.append(e)
    return out


def _shards(count: int, engines: int) -> list[list[int]]:
    """Contiguous, balanced shards of range(count), one per engine."""
    size, extra = divmod(count, engines)
    out, start = [], 0
    for i in range(engines):
        end = start + size + (1 if i < extra else 0)
        out.append(list(range(start, end)))
        start = end
    return out
