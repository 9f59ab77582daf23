"""Topology: the only module that knows where things run (placement groups, actors; joining
a cluster is connect.py).

Each role (generator, solver) has `engines` model actors for data-parallel generation. Every
engine gets a placement-group bundle of `gpus_per_engine` GPUs (its tensor-parallel size) and
`cpus_per_engine` CPUs; on a CPU machine bundles are CPU-only. Separate roles get separate
bundles; `colocate=True` puts engine i of every role on the same bundle (sized for the largest
and the GPUs shared fractionally), so two small models can share GPUs. PACK keeps bundles on few
nodes (fast weight sync), SPREAD spreads them (fault isolation). The learner, when a run trains,
gets the last bundles of the same group to itself (`learner_cpus` / `learner_gpus` for each of
its `learner_ranks` data-parallel ranks), so its DeepSpeed engine never competes with an engine
for a device, and PACK keeps it near the engines its weights go to.

Several nodes: `node_resources` (config: model.node_resources) is added to every engine and
learner bundle, so that Ray places them only on nodes that carry those custom resources, e.g.
{"spade_model": 0.001} with the model nodes started as `ray start --resources='{"spade_model":
1}'` (a tiny amount only selects the node: the bundle's CPUs and GPUs size it). The sandbox pool
does the same with its own resource (execution/pool.py), so sandbox actors stay off model nodes.
Custom resources rather than Ray node labels (`bundle_label_selector`): both placed correctly
in Ray 2.60 (tried: PACK, SPREAD, STRICT_PACK), but labels are a beta feature whose bundle
selectors were ignored in earlier releases (ray#55590; STRICT_PACK until ray#60170) and need
autoscaler v2 to scale a group up, while custom resources work with any Ray, KubeRay and
autoscaler version, and also count (a node's `spade_sandbox` caps the actors it takes).
A node that dies takes its bundles with it: Ray reschedules them on nodes that have room (the
group is RESCHEDULING meanwhile) and restarts their engines there (measured, tests/
test_multinode.py: the bundle moved 11-14 s after its node's SIGKILL, the engine up 6-7 s
later); until then the engine's calls fail (its prompts come back `lost`, rollout/actor.py).

Not handled here yet: vLLM tensor parallelism across Ray workers inside one bundle of several
GPUs needs vLLM's own Ray executor started inside the bundle (distributed_executor_backend="ray");
the bundle shape is already right for it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from spade_ray.config import STRATEGIES
from spade_ray.connect import connect
from spade_ray.learner.actor import LearnerGroup
from spade_ray.records import LearnerParams
from spade_ray.rollout.actor import ModelActor, RoleEngines

PLACEMENT_TIMEOUT_S = 120.0


@dataclasses.dataclass(frozen=True)
class RoleSpec:
    role: str  # "generator" | "solver"
    backend: str  # "hf" | "vllm" | "openai"
    model: str
    engines: int = 1
    gpus_per_engine: int = 0  # = tensor-parallel size; 0 on a CPU machine
    cpus_per_engine: float = 1.0
    backend_kwargs: tuple[tuple[str, Any], ...] = ()  # hashable: (name, value) pairs

    def __post_init__(self) -> None:
        if self.engines < 1:
            raise ValueError(f"{self.role}: engines must be >= 1, got {self.engines}")
        if self.gpus_per_engine < 0 or self.cpus_per_engine <= 0:
            raise ValueError(f"{self.role}: gpus_per_engine must be >= 0 and cpus_per_engine > 0")


def bundles_for(specs: Sequence[RoleSpec], colocate: bool,
                node_resources: Mapping[str, float] | None = None
                ) -> tuple[list[dict], list[list[int]]]:
    """The bundles, and for each role the bundle index of each of its engines."""
    extra = dict(node_resources or {})
    if not colocate:
        bundles, where = [], []
        for spec in specs:
            where.append(list(range(len(bundles), len(bundles) + spec.engines)))
            bundles += [_bundle(spec.cpus_per_engine, spec.gpus_per_engine, extra)
                        for _ in range(spec.engines)]
        return bundles, where
    count = max(s.engines for s in specs)
    # Colocated engines share a bundle: CPUs add up; GPUs are shared, so the bundle needs as
    # many as the largest engine and each engine asks for its share (see engine_resources).
    bundles = [_bundle(sum(s.cpus_per_engine for s in specs if i < s.engines),
                       max(s.gpus_per_engine for s in specs), extra) for i in range(count)]
    return bundles, [list(range(s.engines)) for s in specs]


def engine_resources(spec: RoleSpec, specs: Sequence[RoleSpec], colocate: bool
                     ) -> dict[str, float]:
    gpus = float(spec.gpus_per_engine)
    if colocate and gpus:
        gpus /= sum(1 for s in specs if s.gpus_per_engine)  # fractional: all fit the bundle
    return {"num_cpus": spec.cpus_per_engine, "num_gpus": gpus}


def _engine_key(spec: RoleSpec) -> tuple:
    return dataclasses.astuple(dataclasses.replace(spec, role=""))


def _bundle(cpus: float, gpus: int, extra: Mapping[str, float] | None = None
            ) -> dict[str, float]:
    return {"CPU": cpus, **({"GPU": float(gpus)} if gpus else {}), **(extra or {})}


class Cluster:
    """The placement group and the role engines of one run. Use as a context manager."""

    def __init__(self, specs: Sequence[RoleSpec], colocate: bool = False,
                 strategy: str = "PACK",
                 learner_cpus: float = 0.0, learner_gpus: int = 0, learner_ranks: int = 1,
                 node_resources: Mapping[str, float] | None = None) -> None:
        """`learner_cpus` > 0 reserves the learner's bundles, one per rank (`start_learner`);
        `node_resources`: custom Ray resources every bundle asks for (the nodes it may use)."""
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown placement strategy {strategy!r}: use one of "
                             f"{', '.join(STRATEGIES)}")
        if len({s.role for s in specs}) != len(specs):
            raise ValueError(f"each role may appear once, got {[s.role for s in specs]}")
        connect()
        # Colocated roles with the same engine spec (the same policy model serving both) share
        # their engines rather than loading the model twice on the same devices.
        groups: list[list[RoleSpec]] = []
        for spec in specs:
            shared = colocate and next(
                (g for g in groups if _engine_key(g[0]) == _engine_key(spec)), None)
            if shared:
                shared.append(spec)
            else:
                groups.append([spec])
        engine_specs = [g[0] for g in groups]
        bundles, where = bundles_for(engine_specs, colocate, node_resources)
        self._learner_bundles = None
        if learner_cpus > 0:
            if learner_ranks < 1:
                raise ValueError(f"learner_ranks must be >= 1, got {learner_ranks}")
            self._learner_bundles = (list(range(len(bundles), len(bundles) + learner_ranks)),
                                     learner_cpus, learner_gpus)
            bundles += [_bundle(learner_cpus, learner_gpus, node_resources)
                        for _ in range(learner_ranks)]
        elif learner_gpus:
            raise ValueError("learner_gpus needs learner_cpus > 0 (the learner's own bundle)")
        self.placement_group: PlacementGroup = placement_group(bundles, strategy=strategy)
        try:
            ray.get(self.placement_group.ready(), timeout=PLACEMENT_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            remove_placement_group(self.placement_group)
            hint = (f"; every bundle asks for {dict(node_resources)}: are nodes with those "
                    "resources up (ray start --resources)?" if node_resources else "")
            raise RuntimeError(f"placement group {bundles} ({strategy}) could not be placed in "
                               f"{PLACEMENT_TIMEOUT_S:.0f} s: the cluster has "
                               f"{ray.cluster_resources()}{hint}") from None
        self.roles: dict[str, RoleEngines] = {}
        self.learner: LearnerGroup | None = None
        for group, indices in zip(groups, where):
            spec = group[0]
            actors = [ModelActor.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self.placement_group, placement_group_bundle_index=index),
                **engine_resources(spec, engine_specs, colocate),
            ).remote(spec.backend, spec.model, dict(spec.backend_kwargs)) for index in indices]
            engines = RoleEngines("+".join(s.role for s in group), actors)
            for member in group:
                self.roles[member.role] = engines
        # Surface a model that cannot load now, with its own error, not at the first request.
        ray.get([a.weights_version.remote() for e in self.engines for a in e.actors])

    def start_learner(self, model_path: str, params: LearnerParams) -> LearnerGroup:
        """The learner's ranks on their own bundles (the Cluster was built with learner_cpus)."""
        if self._learner_bundles is None:
            raise RuntimeError("this Cluster reserved no learner bundle: pass learner_cpus > 0")
        if self.learner is not None:
            raise RuntimeError("the learner is already started")
        indices, cpus, gpus = self._learner_bundles
        self.learner = LearnerGroup.start(self.placement_group, indices, cpus, gpus, model_path,
                                          params)
        return self.learner

    @property
    def engines(self) -> list[RoleEngines]:
        """Each distinct set of engines once (shared roles appear once)."""
        return list({id(e): e for e in self.roles.values()}.values())

    def __getitem__(self, role: str) -> RoleEngines:
        return self.roles[role]

    def close(self) -> None:
        for engines in self.engines:
            for actor in engines.actors:
                ray.kill(actor, no_restart=True)
        if self.learner is not None:
            self.learner.kill()
        self.roles, self.learner = {}, None
        remove_placement_group(self.placement_group)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
