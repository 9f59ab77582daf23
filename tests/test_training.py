"""The learn stage with a real learner actor and real engines (tiny model): publish, gate,
roll back, resume. The validation pass@1 is injected so the pass@1 gate's two paths are exact;
the held-out log-prob gate is measured for real."""

import dataclasses

import pytest
import ray

from spade_ray.cluster import Cluster, RoleSpec
from spade_ray.config import LearnerConfig
from spade_ray.evaluation.humaneval import ValidationResult
from spade_ray.records import PreferencePair, SamplingParams
from spade_ray.training import Trainer, learn, learner_kwargs

GREEDY = SamplingParams(temperature=0, max_tokens=8)


def pairs(n):
    return [PreferencePair(task_id=f"t{i}", prompt="def add(a, b):",
                           chosen="def add(a, b):\n    return a + b\n",
                           rejected="def add(a, b):\n    return None\n",
                           chosen_candidate_id=f"t{i}/c", rejected_candidate_id=f"t{i}/r",
                           chosen_score=1.0, rejected_score=0.0, solver_version=0,
                           generator_version=-1) for i in range(n)]


def scored(pass_at_1):
    return lambda: ValidationResult(pass_at_k={1: pass_at_1}, problems=4, samples_per_problem=1,
                                    passed_per_problem={}, syntax_errors=0, generate_s=0.0,
                                    check_s=0.0)


@pytest.fixture(scope="module")
def setup(tiny_model, tmp_path_factory):
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    spec = RoleSpec("solver", "hf", tiny_model, cpus_per_engine=0.5,
                    backend_kwargs=(("dtype", "float32"),))
    config = LearnerConfig(name="dpo", cpus=1, min_pairs_per_update=2, gate_tolerance=0.05,
                           kwargs={"lora_rank": 4, "lr": 0.05, "micro_batch_size": 2})
    try:
        with Cluster([spec], learner_cpus=config.cpus) as cluster:
            actor = cluster.start_learner(tiny_model, learner_kwargs(config))
            trainer = Trainer.start(config, actor, cluster.engines,
                                    tmp_path_factory.mktemp("run"))
            yield trainer, cluster
    finally:
        ray.shutdown()


def test_the_learner_holds_its_own_bundle(setup):
    trainer, cluster = setup
    group = cluster.placement_group
    assert ray.util.placement_group_table(group)["bundles"] == {0: {"CPU": 0.5}, 1: {"CPU": 1.0}}
    trainer.learner.step()  # started
    bundle = f"CPU_group_1_{group.id.hex()}"
    assert ray.cluster_resources()[bundle] == 1.0
    assert ray.available_resources().get(bundle, 0.0) == 0.0  # all taken by the learner


def test_too_few_pairs_only_buffer(setup):
    trainer, _ = setup
    assert learn(trainer, pairs(1), 0.5, scored(0.5)).update == "buffering"
    assert trainer.version == 0


def test_accepted_update_reaches_the_engines_with_a_new_version(setup):
    trainer, cluster = setup
    solver = cluster["solver"]
    before = solver.generate(["def add(a, b):"], GREEDY).completions[0][0]
    outcome = learn(trainer, pairs(2), 0.5, scored(0.5))
    after = solver.generate(["def add(a, b):"], GREEDY).completions[0][0]
    assert outcome.update == "accepted" and outcome.learner_step >= 1
    assert after.weights_version == trainer.version == 1 > before.weights_version
    assert after.text != before.text


def test_harmful_update_is_rolled_back(setup):
    trainer, cluster = setup
    solver = cluster["solver"]
    served = solver.generate(["def add(a, b):"], GREEDY).completions[0][0].text
    outcome = learn(trainer, pairs(2), 0.5, scored(0.1))  # the gate sees a drop of 0.4
    restored = solver.generate(["def add(a, b):"], GREEDY).completions[0][0]
    assert outcome.update == "rejected"
    assert restored.text == served  # the previous weights, under a newer version
    assert restored.weights_version == trainer.version == 3


def test_resume_restores_the_last_accepted_state(setup, tiny_model):
    trainer, cluster = setup
    solver = cluster["solver"]
    served = solver.generate(["def add(a, b):"], GREEDY).completions[0][0].text
    spec = RoleSpec("solver", "hf", tiny_model, cpus_per_engine=0.5,
                    backend_kwargs=(("dtype", "float32"),))
    with Cluster([spec]) as restarted:  # fresh engines, as after a restart: base weights
        fresh = dataclasses.replace(trainer, engines=restarted.engines, version=0)
        fresh.resume(trainer.state())
        again = restarted["solver"].generate(["def add(a, b):"], GREEDY).completions[0][0]
    assert fresh.version == trainer.version
    assert again.text == served and again.weights_version == trainer.version


def test_an_update_that_unlearns_held_out_solutions_is_rejected(setup):
    trainer, cluster = setup
    solver = cluster["solver"]
    gated = dataclasses.replace(
        trainer, config=dataclasses.replace(trainer.config, gate_logp_tolerance=0.1),
        heldout=(("def add(a, b):", "\n    return a + b\n"),),
        accepted_checkpoint=str(trainer.checkpoints / "step_000000"))
    gated.learner.load_checkpoint(gated.accepted_checkpoint)  # a fresh learner
    before = gated.heldout_logp = gated.measure_heldout()

    good = learn(gated, pairs(2), 0.5, scored(0.5))  # prefers the held-out solution
    assert good.update == "accepted" and good.gate_heldout_logp > before
    assert gated.heldout_logp == good.gate_heldout_logp  # the new accepted baseline
    served = solver.generate(["def add(a, b):"], GREEDY).completions[0][0].text

    harmful = [dataclasses.replace(p, chosen=p.rejected, rejected=p.chosen) for p in pairs(4)]
    bad = learn(gated, harmful, 0.5, scored(0.5))  # pass@1 holds: only the log-prob falls
    assert bad.update == "rejected" and bad.rejected_by == ("heldout_logp",)
    assert bad.gate_heldout_logp < gated.heldout_logp - 0.1
    assert solver.generate(["def add(a, b):"], GREEDY).completions[0][0].text == served
    assert gated.measure_heldout() == pytest.approx(gated.heldout_logp, abs=1e-5)
