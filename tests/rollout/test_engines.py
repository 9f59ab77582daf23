"""Model actors on a real local Ray cluster, through placement groups."""

import os
import signal
import time

import pytest
import ray
import torch

from spade_ray.cluster import Cluster, RoleSpec, bundles_for, engine_resources
from spade_ray.records import SamplingParams
from spade_ray.rollout.actor import make_backend

GREEDY = SamplingParams(temperature=0, max_tokens=6)


def wait_until_back(actor, timeout_s=120):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ray.get(actor.pid.remote(), timeout=10)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster(tiny_model):
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    specs = [RoleSpec("generator", "hf", tiny_model, engines=1, cpus_per_engine=0.5,
                      backend_kwargs=(("dtype", "float32"),)),
             RoleSpec("solver", "hf", tiny_model, engines=2, cpus_per_engine=0.5,
                      backend_kwargs=(("dtype", "float32"),))]
    try:
        with Cluster(specs, strategy="PACK") as c:
            yield c
    finally:
        ray.shutdown()


def test_roles_run_in_their_placement_group_bundles(cluster):
    table = ray.util.placement_group_table(cluster.placement_group)
    assert table["state"] == "CREATED"
    assert len(table["bundles"]) == 3  # 1 generator engine + 2 solver engines


def test_a_cluster_without_a_learner_bundle_refuses_to_start_a_learner(cluster):
    with pytest.raises(RuntimeError, match="no learner bundle"):
        cluster.start_learner("unused", {})


def test_requests_are_spread_over_engines_and_keep_order(cluster):
    prompts = [f"task {i}" for i in range(5)]
    sharded = cluster["solver"].generate(prompts, GREEDY)
    single = cluster["generator"].generate(prompts, GREEDY)  # same model, one engine
    assert sharded.lost == ()
    assert [g[0].text for g in sharded.completions] == [g[0].text for g in single.completions]


def test_a_prompt_over_the_context_is_refused_alone_on_whichever_engine(cluster):
    # one prompt in the second engine's shard too long: that shard's other prompts are answered
    prompts = ["task 0", "task 1", "task 2", "a " * 9000, "task 4"]
    result = cluster["solver"].generate(prompts, GREEDY)
    assert result.lost == () and [len(g) for g in result.completions] == [1, 1, 1, 0, 1]


def test_engines_count_the_time_a_request_is_in_flight(cluster):
    engines = cluster["solver"]
    before = engines.busy_s
    started = time.monotonic()
    engines.generate(["task"], GREEDY)
    assert 0 < engines.busy_s - before <= time.monotonic() - started


def test_weight_update_reaches_every_engine_and_stamps_completions(cluster, tiny_model):
    reference = make_backend("hf", tiny_model, dtype="float32")
    torch.manual_seed(7)
    new = {k: torch.randn_like(v) for k, v in reference.state_dict().items()}
    before = cluster["solver"].generate(["x", "y"], GREEDY)
    cluster["solver"].update_weights(new, version=1)
    after = cluster["solver"].generate(["x", "y"], GREEDY)
    assert {g[0].weights_version for g in after.completions} == {1}
    assert [g[0].text for g in after.completions] != [g[0].text for g in before.completions]


def test_dead_engine_loses_its_prompts_then_comes_back_with_the_latest_weights(cluster):
    solver = cluster["solver"]
    victim = solver.actors[0]
    os.kill(ray.get(victim.pid.remote()), signal.SIGKILL)
    result = solver.generate(["a", "b", "c", "d"], GREEDY)
    assert result.lost == (0, 1)  # engine 0's shard
    assert result.completions[2] is not None and result.completions[0] is None
    wait_until_back(victim)  # Ray restarts it, with its initial weights
    again = solver.generate(["a", "b", "c", "d"], GREEDY)
    assert again.lost == ()
    assert {g[0].weights_version for g in again.completions} == {solver.weights_version}


def test_colocated_roles_share_bundles_and_split_gpus():
    specs = [RoleSpec("generator", "vllm", "m", engines=2, gpus_per_engine=1),
             RoleSpec("solver", "vllm", "m", engines=2, gpus_per_engine=1)]
    bundles, where = bundles_for(specs, colocate=True)
    assert bundles == [{"CPU": 2.0, "GPU": 1.0}] * 2
    assert where == [[0, 1], [0, 1]]
    assert engine_resources(specs[0], specs, colocate=True)["num_gpus"] == 0.5


def test_separate_roles_get_their_own_bundles():
    specs = [RoleSpec("generator", "vllm", "m", engines=1, gpus_per_engine=2),
             RoleSpec("solver", "vllm", "m", engines=2, gpus_per_engine=1)]
    bundles, where = bundles_for(specs, colocate=False)
    assert bundles == [{"CPU": 1.0, "GPU": 2.0}, {"CPU": 1.0, "GPU": 1.0},
                       {"CPU": 1.0, "GPU": 1.0}]
    assert where == [[0], [1, 2]]


def test_unknown_backend_is_named():
    with pytest.raises(ValueError, match="'tgi'"):
        make_backend("tgi", "m")


def test_colocated_identical_roles_share_one_set_of_engines(tiny_model):
    spec = dict(backend="hf", model=tiny_model, cpus_per_engine=0.25,
                backend_kwargs=(("dtype", "float32"),))
    with Cluster([RoleSpec("generator", **spec), RoleSpec("solver", **spec)],
                 colocate=True) as c:
        assert c["generator"] is c["solver"]
        assert len(ray.util.placement_group_table(c.placement_group)["bundles"]) == 1
        assert c["solver"].generate(["x"], GREEDY).lost == ()
