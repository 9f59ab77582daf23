"""Several Ray nodes on this machine (ray.cluster_utils.Cluster: a raylet, object store and node
id each): placement by custom resources, and what survives the loss of a node.

The head has no CPUs (as on KubeRay, where it runs only the driver); "model" nodes carry
MODEL_RESOURCE, "sandbox" nodes SANDBOX_RESOURCE, as the KubeRay worker groups do. Where an
actor runs is read two ways: its placement-group bundle's node (placement_group_table) and the
raylet that started its process (a worker's parent is its node's raylet), or, for sandbox actors,
their own ray.get_runtime_context().get_node_id(). Nodes are removed with allow_graceful=False:
SIGKILL, as when a pod or machine dies. Tests run in file order on one cluster; each adds the
nodes it kills.
"""

import dataclasses
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import ray
from omegaconf import OmegaConf
from ray.cluster_utils import Cluster as RayCluster

from spade_ray import stages
from spade_ray.cluster import Cluster, RoleSpec, bundles_for
from spade_ray.config import sandbox_limits, validate_model
from spade_ray.execution.pool import Job, SandboxPool, actor_executed
from spade_ray.records import ExecStatus, LearnerParams, SamplingParams, TestSuite
from spade_ray.rollout.sampling import TokenMeter, sample_distinct
from tests.conftest import TEST_LIMITS

slow = pytest.mark.slow  # each cluster test; the config checks at the end are fast

MODEL_RESOURCE = {"spade_model": 0.001}  # model.node_resources
SANDBOX_RESOURCE = {"spade_sandbox": 1}  # sandbox.resources
OBJECT_STORE = 80 * 2**20  # per node: the tests move only small objects
SPADE_RAY = str(Path(sys.executable).parent / "spade-ray")
REPO = Path(__file__).resolve().parents[1]
FAST_LEARNER = LearnerParams(lr=1e-2, bf16=False, min_pairs_per_update=4, micro_batch_size=2,
                             lora_rank=4, seed=0)


@dataclasses.dataclass
class Nodes:
    ray_cluster: RayCluster
    model: list  # ray._private.node.Node of the live model nodes
    sandbox: list

    def add(self, kind: str, cpus: float, amount: float = 10):
        name = "spade_model" if kind == "model" else "spade_sandbox"
        node = self.ray_cluster.add_node(num_cpus=cpus, resources={name: amount},
                                         object_store_memory=OBJECT_STORE)
        getattr(self, kind).append(node)
        return node

    def kill(self, node) -> None:
        (self.model if node in self.model else self.sandbox).remove(node)
        self.ray_cluster.remove_node(node, allow_graceful=False)


@pytest.fixture(scope="module")
def nodes():
    ray_cluster = RayCluster(initialize_head=True, head_node_args=dict(
        num_cpus=0, include_dashboard=False, object_store_memory=OBJECT_STORE))
    try:
        found = Nodes(ray_cluster, [], [])
        found.add("model", cpus=2)
        found.add("sandbox", cpus=1)
        ray.init(address=ray_cluster.address, log_to_driver=False)
        ray_cluster.wait_for_nodes()
        yield found
    finally:
        ray.shutdown()
        ray_cluster.shutdown()


def raylet_of(pid: int) -> int:
    """The pid of the raylet that started this worker process (its node)."""
    return psutil.Process(pid).ppid()


def raylet_pid(node) -> int:
    return node.all_processes["raylet"][0].process.pid


def node_ids(pool: SandboxPool) -> list[str]:
    return ray.get([a.node_id.remote() for a in pool.actors])


def wait_for(condition, timeout_s: float, what: str) -> float:
    """Seconds until condition() holds; an actor still restarting counts as not yet."""
    def holds() -> bool:
        try:
            return condition()
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            return False

    started = time.monotonic()
    while not holds():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(0.2)
    return time.monotonic() - started


# ---------------------------------------------------------------------------------- placement


@slow
def test_engines_and_learner_run_on_model_nodes_and_sandbox_actors_on_sandbox_nodes(
        nodes, tiny_model):
    [model], [sandbox] = nodes.model, nodes.sandbox
    specs = [RoleSpec(role, "hf", tiny_model, cpus_per_engine=0.25,
                      backend_kwargs=(("dtype", "float32"),)) for role in ("generator", "solver")]
    with Cluster(specs, learner_cpus=0.25, node_resources=MODEL_RESOURCE) as cluster, \
            SandboxPool(limits=TEST_LIMITS, cpus_per_actor=0.5,
                        resources=SANDBOX_RESOURCE) as pool:
        learner = cluster.start_learner(tiny_model, FAST_LEARNER)
        table = ray.util.placement_group_table(cluster.placement_group)
        assert set(table["bundles_to_node_id"].values()) == {model.node_id}
        engine_pids = ray.get([a.pid.remote() for e in cluster.engines for a in e.actors])
        learner_pids = ray.get([a.pid.remote() for a in learner.actors])
        assert {raylet_of(p) for p in engine_pids + learner_pids} == {raylet_pid(model)}
        assert len(pool.actors) == 2  # the sandbox node's 1 CPU, 0.5 each (not the model's 2)
        assert node_ids(pool) == [sandbox.node_id] * 2
        assert pool.run("print(6 * 7)").stdout == "42\n"


@slow
def test_sandbox_actors_fail_clearly_when_no_node_has_their_resource(nodes):
    with pytest.raises(RuntimeError, match="no_such_group"):
        SandboxPool(limits=TEST_LIMITS, resources={"no_such_group": 1})


# ------------------------------------------------------------------------- fault injection


def candidate(i: int) -> tuple[str, TestSuite]:
    """Candidate i passes when i is even: a verdict says whose result it is."""
    code = f"import time\ntime.sleep(0.2)\ndef f(x):\n    return x + {i % 2}\n"
    return code, TestSuite(asserts=("assert f(1) == 1",))


@slow
def test_sandbox_node_lost_mid_batch_costs_no_candidate_and_actors_come_back(nodes):
    """check_many's jobs stream through the pool while the node of two of its three actors is
    killed: every candidate comes back once, with its own verdict, none as sandbox_error."""
    [doomed] = nodes.sandbox  # 1 CPU: two of the three actors (0.5 CPU each)
    with SandboxPool(limits=TEST_LIMITS, num_actors=3, cpus_per_actor=0.5,
                     resources=SANDBOX_RESOURCE) as pool:
        survivor = nodes.add("sandbox", cpus=2)  # the third actor, and room for two more
        assert sorted(node_ids(pool)) == sorted([doomed.node_id] * 2 + [survivor.node_id])
        on_doomed = [a for a, n in zip(pool.actors, node_ids(pool)) if n == doomed.node_id]
        jobs = [Job(code, tests=tests) for code, tests in map(candidate, range(40))]
        got: list = []
        batch = threading.Thread(target=lambda: got.extend(pool.stream(jobs)))
        batch.start()
        wait_for(lambda: sum(ray.get([a.executed.remote() for a in on_doomed])) >= 2, 120,
                 "the doomed node's actors start on the batch")
        nodes.kill(doomed)
        batch.join(timeout=300)
        assert not batch.is_alive()
        indices = sorted(i for i, _ in got)
        assert indices == list(range(len(jobs)))  # each candidate once: none lost, none twice
        results = dict(got)
        assert [r.execution.status for r in results.values()
                if r.execution.status is ExecStatus.SANDBOX_ERROR] == []
        assert [results[i].passed for i in range(len(jobs))] == [i % 2 == 0
                                                                 for i in range(len(jobs))]
        assert pool.retries >= 1  # the doomed node held jobs when it died
        recovered = wait_for(lambda: node_ids(pool) == [survivor.node_id] * 3, 120,
                             "the lost actors restart on the surviving node")
        print(f"\nsandbox node loss: {pool.retries} jobs re-run, actors back on the survivor "
              f"{recovered:.1f} s after the batch; per-actor jobs {actor_executed(pool)}")
        code, tests = candidate(0)
        assert pool.check_many([code] * 3, [tests] * 3)[0].passed


@slow
def test_engine_node_lost_mid_generate_its_prompts_are_reissued(nodes, tiny_model):
    """Two solver engines, one per model node (SPREAD); the node of one is killed while both
    generate: sample_distinct re-issues the lost prompts and every prompt gets its n."""
    [kept] = nodes.model
    doomed = nodes.add("model", cpus=1)
    spec = RoleSpec("solver", "hf", tiny_model, engines=2, cpus_per_engine=0.5,
                    backend_kwargs=(("dtype", "float32"),))
    with Cluster([spec], strategy="SPREAD", node_resources=MODEL_RESOURCE) as cluster:
        table = ray.util.placement_group_table(cluster.placement_group)
        assert sorted(table["bundles_to_node_id"].values()) == sorted([kept.node_id,
                                                                       doomed.node_id])
        engines = cluster["solver"]
        prompts = [f"def task_{i}(x):\n" for i in range(32)]
        # long enough that the kill lands inside the first call (~10 s per engine here)
        sampling = SamplingParams(n=2, temperature=1.0, max_tokens=1024, seed=1)
        victim = psutil.Process(ray.get(engines.actors[1].pid.remote()))
        assert raylet_of(victim.pid) == raylet_pid(doomed)
        idle_cpu_s = sum(victim.cpu_times()[:2])
        meter = TokenMeter("solver")
        out: dict = {}
        started = time.monotonic()
        worker = threading.Thread(target=lambda: out.setdefault("sample", sample_distinct(
            lambda p, s: engines.generate(p, s).completions, prompts, sampling, meter,
            resample_rounds=2)))
        worker.start()
        wait_for(lambda: sum(victim.cpu_times()[:2]) > idle_cpu_s + 0.5, 60,
                 "the doomed node's engine starts generating")
        assert worker.is_alive()
        nodes.kill(doomed)
        worker.join(timeout=300)
        sample = out["sample"]
        print(f"\nengine node loss: {sample.lost} prompt requests lost, "
              f"{time.monotonic() - started:.1f} s in all")
        assert sample.lost >= 1
        assert [len(group) for group in sample.completions] == [2] * len(prompts)
        # Ray reschedules the dead node's bundle on the surviving model node (it has room) and
        # restarts the engine there; then both engines serve again.
        moved = wait_for(lambda: set(ray.util.placement_group_table(cluster.placement_group)
                                     ["bundles_to_node_id"].values()) == {kept.node_id},
                         180, "the lost bundle is rescheduled on the surviving model node")
        back = wait_for(lambda: {raylet_of(p) for p in ray.get(
            [a.pid.remote() for a in engines.actors], timeout=10)} == {raylet_pid(kept)},
            180, "the lost engine restarts on the surviving model node")
        print(f"bundle rescheduled after {moved:.1f} s, engine up {back:.1f} s later")
        short = dataclasses.replace(sampling, max_tokens=8)
        assert engines.generate(prompts[:4], short).lost == ()
        assert [len(g) for g in stages.complete(engines)(prompts[:4], short)] == [2] * 4


def metrics_rounds(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["round"] for line in path.read_text().splitlines() if line.strip()]


@slow
@pytest.mark.timeout(900)  # two runs of the tiny experiment
def test_driver_killed_mid_run_resumes_on_the_cluster(nodes, tmp_path):
    """`spade-ray run` as a driver of the multi-node cluster (RAY_ADDRESS), engines and sandbox
    actors placed by config; kill -9 mid-round 1, run the same command again: it resumes."""
    [model], [sandbox] = nodes.model, nodes.sandbox
    cmd = [SPADE_RAY, "run", "experiment=cpu_tiny", f"run_root={tmp_path}", "wandb.mode=offline",
           "loop.rounds=3", "validation.problems=2", "sandbox.placement=pool",
           "sandbox.cpus_per_worker=1", "+sandbox.resources.spade_sandbox=1",
           "+model.node_resources.spade_model=0.001"]
    env = {**os.environ, "RAY_ADDRESS": nodes.ray_cluster.address}
    run_dir = tmp_path / "cpu_tiny"
    log = tmp_path / "first.log"
    with log.open("w") as out:
        driver = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True)
        try:
            wait_for(lambda: metrics_rounds(run_dir) != [] or driver.poll() is not None, 400,
                     "round 0 of the first run")
            assert driver.poll() is None, log.read_text()[-3000:]
            placed = [t for t in ray.util.placement_group_table().values()
                      if t["state"] == "CREATED"]
            assert [set(t["bundles_to_node_id"].values()) for t in placed] == [{model.node_id}]
        finally:
            os.killpg(driver.pid, signal.SIGKILL)  # mid-round 1: the driver and its children
            driver.wait()
    done_before = metrics_rounds(run_dir)
    assert done_before and done_before[-1] < 2
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"resume: rounds 0..{done_before[-1]} already completed" in again.stdout
    assert metrics_rounds(run_dir) == [0, 1, 2]
    db = sqlite3.connect(run_dir / "trace.sqlite")
    assert db.execute("SELECT COUNT(*) FROM rounds").fetchone()[0] == 3  # none twice
    print(f"\ndriver killed after rounds {done_before}; the re-run resumed and completed 0..2 "
          f"on sandbox node {sandbox.node_id[:8]} and model node {model.node_id[:8]}")


# ------------------------------------------------------------------------------- config


def test_node_resources_are_added_to_every_engine_and_learner_bundle():
    specs = [RoleSpec("generator", "vllm", "m", gpus_per_engine=1),
             RoleSpec("solver", "vllm", "m", engines=2, gpus_per_engine=1)]
    assert bundles_for(specs, colocate=False, node_resources=MODEL_RESOURCE)[0] == [
        {"CPU": 1.0, "GPU": 1.0, "spade_model": 0.001}] * 3
    assert bundles_for(specs, colocate=True, node_resources=MODEL_RESOURCE)[0] == [
        {"CPU": 2.0, "GPU": 1.0, "spade_model": 0.001}, {"CPU": 1.0, "GPU": 1.0,
                                                         "spade_model": 0.001}]
    assert bundles_for(specs, colocate=False)[0] == [{"CPU": 1.0, "GPU": 1.0}] * 3


def test_the_shipped_configs_place_nothing_by_resource():
    for path in sorted((REPO / "conf" / "model").glob("*.yaml")):
        assert validate_model(OmegaConf.load(path)).node_resources == {}, path.name
    for path in sorted((REPO / "conf" / "sandbox").glob("*.yaml")):
        assert sandbox_limits(OmegaConf.load(path))[0].resources == {}, path.name


@pytest.mark.parametrize(("resources", "message"), [
    ({"GPU": 1}, r"model\.node_resources\.GPU: GPU is Ray's own resource"),
    ({"spade_model": 0}, r"model\.node_resources\.spade_model=0\.0: use a number >= 0\.0001"),
    ({"spade_model": 0.00001}, r"model\.node_resources\.spade_model=1e-05"),
    ({"spade model": 1}, r"model\.node_resources: resource name 'spade model'"),
])
def test_model_node_resources_are_checked(resources, message):
    cfg = OmegaConf.load(REPO / "conf" / "model" / "tiny_hf.yaml")
    cfg.node_resources = resources
    with pytest.raises(ValueError, match=message):
        validate_model(cfg)


def test_sandbox_resources_are_checked_and_need_the_pool():
    with pytest.raises(ValueError, match=r"sandbox\.resources\.CPU: CPU is Ray's own"):
        sandbox_limits({"resources": {"CPU": 1}})
    with pytest.raises(ValueError, match=r"sandbox\.resources\.spade_sandbox=-1\.0"):
        sandbox_limits({"resources": {"spade_sandbox": -1}})
    with pytest.raises(ValueError, match="sandbox.placement=driver"):
        sandbox_limits({"resources": {"spade_sandbox": 1}, "placement": "driver"})
    assert sandbox_limits({"resources": {"spade_sandbox": 1}})[0].resources == {
        "spade_sandbox": 1.0}
