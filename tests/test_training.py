"""The learn stage with a real learner actor and real engines (tiny model): publish, gate,
roll back, resume. The validation pass@1 is injected so the pass@1 gate's two paths are exact;
the held-out log-prob gate is measured for real. Every test starts from the base weights on a
fresh Trainer (the Ray cluster and the learner actor are shared: they are slow to start)."""

import dataclasses

import pytest
import ray

from spade_ray.cluster import Cluster, RoleSpec
from spade_ray.evaluation.humaneval import ValidationResult
from spade_ray.records import (
    Demonstration,
    GateSignal,
    LearnerParams,
    PreferencePair,
    Role,
    RoundState,
    SamplingParams,
    TrainAlgorithm,
    UpdateStatus,
)
from spade_ray.training import Gate, Trainer

pytestmark = pytest.mark.slow  # a cluster, engines and a learner actor: ~40 s for the module

GREEDY = SamplingParams(temperature=0, max_tokens=8)
PROMPT = "def add(a, b):"
HELDOUT = ((PROMPT, "\n    return a + b\n"),)


def pairs(n, flipped=False):
    good, bad = "def add(a, b):\n    return a + b\n", "def add(a, b):\n    return None\n"
    chosen, rejected = (bad, good) if flipped else (good, bad)
    return [PreferencePair(task_id=f"t{i}", prompt=PROMPT, chosen=chosen, rejected=rejected,
                           chosen_candidate_id=f"t{i}/c", rejected_candidate_id=f"t{i}/r",
                           chosen_score=1.0, rejected_score=0.0, solver_version=0,
                           generator_version=-1) for i in range(n)]


def validation(pass_at_1):
    return ValidationResult(pass_at_k={1: pass_at_1}, problems=4, samples_per_problem=1,
                            passed_per_problem={}, syntax_errors=0, generate_s=0.0, check_s=0.0)


def spec(tiny_model):
    return RoleSpec("solver", "hf", tiny_model, cpus_per_engine=0.5,
                    backend_kwargs=(("dtype", "float32"),))


@pytest.fixture(scope="module")
def placed(tiny_model, tmp_path_factory):
    """One cluster with a learner; the learner's base checkpoint and merged base weights."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    params = LearnerParams(lora_rank=4, lr=0.05, micro_batch_size=2, min_pairs_per_update=2)
    try:
        with Cluster([spec(tiny_model)], learner_cpus=1) as cluster:
            group = cluster.start_learner(tiny_model, params)
            base = group.save_checkpoint(str(tmp_path_factory.mktemp("base") / "step_0"))
            yield cluster, group, base, group.policy_state_dict()
    finally:
        ray.shutdown()


def start(placed, tmp_path, logp_tolerance=None):
    """A fresh Trainer on the base weights, served under a new version."""
    cluster, group, base, weights = placed
    group.load_checkpoint(base)
    version = cluster["solver"].weights_version + 1
    cluster["solver"].update_weights(weights, version)
    trainer = Trainer.start(TrainAlgorithm.DPO, Gate(0.05, logp_tolerance), group,
                            cluster.engines, tmp_path, HELDOUT)
    trainer.version, trainer.served_pass_at_1 = version, 0.5
    return trainer


def served_text(cluster):
    return cluster["solver"].generate([PROMPT], GREEDY).completions[0][0]


def test_the_learner_holds_its_own_bundle(placed):
    cluster, group, _, _ = placed
    pg = cluster.placement_group
    assert ray.util.placement_group_table(pg)["bundles"] == {0: {"CPU": 0.5}, 1: {"CPU": 1.0}}
    group.step()  # started
    bundle = f"CPU_group_1_{pg.id.hex()}"
    assert ray.available_resources().get(bundle, 0.0) == 0.0  # all taken by the learner


def test_too_few_pairs_only_buffer(placed, tmp_path):
    trainer = start(placed, tmp_path)
    before = trainer.version
    outcome = trainer.gate(trainer.update(pairs(1)), validation(0.5))
    assert (outcome.update, trainer.version) == (UpdateStatus.BUFFERING, before)


def test_items_that_only_buffer_are_checkpointed_for_a_resumed_run(placed, tmp_path):
    trainer = start(placed, tmp_path)
    _, group, base, _ = placed
    outcome = trainer.gate(trainer.update(pairs(1)), validation(0.5))
    assert outcome.update == UpdateStatus.BUFFERING and trainer.accepted_checkpoint != base
    group.load_checkpoint(base)  # as a resumed run's learner starts
    assert ray.get(group.actors[0].buffered.remote()) == 0
    group.load_checkpoint(trainer.carry(RoundState()).learner_checkpoint)
    assert ray.get(group.actors[0].buffered.remote()) == 1


def test_an_update_that_holds_pass_at_1_is_accepted(placed, tmp_path):
    trainer = start(placed, tmp_path)
    outcome = trainer.gate(trainer.update(pairs(2)), validation(0.5))
    assert outcome.update == UpdateStatus.ACCEPTED and outcome.learner_step == 1
    stats = dict(outcome.learner_stats)  # DPO's own figures, not the bookkeeping
    assert {"rewards_accuracy", "lr"} <= set(stats) and not {"loss", "step", "wall_s"} & set(stats)


def test_a_published_update_is_served_under_the_next_version(placed, tmp_path):
    trainer = start(placed, tmp_path)
    cluster = placed[0]
    before = served_text(cluster)
    trainer.update(pairs(2))
    after = served_text(cluster)
    assert (after.weights_version, after.text != before.text) == (before.weights_version + 1,
                                                                  True)


def test_an_update_that_lowers_pass_at_1_is_rolled_back(placed, tmp_path):
    trainer = start(placed, tmp_path)
    cluster = placed[0]
    served = served_text(cluster).text
    outcome = trainer.gate(trainer.update(pairs(2)), validation(0.1))  # a drop of 0.4
    assert (outcome.update, outcome.rejected_by, served_text(cluster).text) == (
        UpdateStatus.REJECTED, (GateSignal.PASS_AT_1,), served)


def test_a_rollback_serves_the_old_weights_under_a_newer_version(placed, tmp_path):
    trainer = start(placed, tmp_path)
    before = trainer.version
    trainer.gate(trainer.update(pairs(2)), validation(0.1))
    assert served_text(placed[0]).weights_version == trainer.version == before + 2


def test_a_started_update_is_served_only_once_it_is_finished(placed, tmp_path):
    trainer = start(placed, tmp_path)
    before = served_text(placed[0])
    training = trainer.start_update(pairs(2))
    during = served_text(placed[0])  # the engines answer while the learner trains
    published = trainer.finish_update(training)
    after = served_text(placed[0])
    assert (during.text, during.weights_version) == (before.text, before.weights_version)
    assert after.weights_version == before.weights_version + 1 and after.text != before.text
    assert published.busy_s > 0


def test_items_older_than_the_staleness_bound_are_dropped_and_counted(placed, tmp_path):
    trainer = start(placed, tmp_path)
    trainer.max_staleness = 1
    written = [dataclasses.replace(p, solver_version=v) for p, v in
               zip(pairs(4), (trainer.version - 2, trainer.version - 2, trainer.version - 1,
                              trainer.version))]
    assert trainer.update(written[:2]) is None  # two versions old: nothing to train on
    outcome = trainer.gate(trainer.update(written[2:]), validation(0.5))
    assert (outcome.update, outcome.stale_items) == (UpdateStatus.ACCEPTED, 2)


def test_resume_restores_the_last_accepted_state(placed, tmp_path, tiny_model):
    trainer = start(placed, tmp_path)
    trainer.gate(trainer.update(pairs(2)), validation(0.5))
    served = served_text(placed[0]).text
    state = trainer.carry(RoundState())
    with Cluster([spec(tiny_model)]) as restarted:  # fresh engines, as after a restart
        fresh = Trainer(TrainAlgorithm.DPO, trainer.gate_config, trainer.learner,
                        restarted.engines, trainer.checkpoints, trainer.served,
                        trainer.accepted_checkpoint)
        fresh.resume(state)
        again = served_text(restarted)
    assert (again.text, again.weights_version) == (served, trainer.version)


def test_an_update_that_unlearns_held_out_solutions_is_rejected(placed, tmp_path):
    trainer = start(placed, tmp_path, logp_tolerance=0.1)
    harmful = pairs(4, flipped=True)  # pass@1 holds: only the log-prob falls
    outcome = trainer.gate(trainer.update(harmful), validation(0.5))
    assert (outcome.update, outcome.rejected_by) == (UpdateStatus.REJECTED,
                                                     (GateSignal.HELDOUT_LOGP,))


def test_an_accepted_update_becomes_the_held_out_baseline(placed, tmp_path):
    trainer = start(placed, tmp_path, logp_tolerance=0.1)
    before = trainer.heldout_logp
    outcome = trainer.gate(trainer.update(pairs(2)), validation(0.5))  # prefers the solution
    assert outcome.gate_heldout_logp > before
    assert trainer.heldout_logp == outcome.gate_heldout_logp


def drifted(trainer):
    """A harmful update accepted by a loose gate: the held-out log-prob it left."""
    outcome = trainer.gate(trainer.update(pairs(2, flipped=True)), validation(0.5), Gate(0.05, 9))
    assert outcome.update is UpdateStatus.ACCEPTED
    return outcome.gate_heldout_logp


def test_small_drops_that_add_up_past_the_tolerance_are_rejected(placed, tmp_path):
    trainer = start(placed, tmp_path, logp_tolerance=0.1)
    base = trainer.heldout_logp
    first = drifted(trainer)
    assert first < base and trainer.heldout_logp == base  # the anchor stays the run's best
    published = trainer.update(pairs(2, flipped=True))
    second = ray.get(published.heldout_logp)
    # a tolerance above this update's own drop and below the drop from the best
    tolerance = ((first - second) + (base - second)) / 2
    outcome = trainer.gate(published, validation(0.5), Gate(0.05, tolerance))
    assert (outcome.update, outcome.rejected_by) == (UpdateStatus.REJECTED,
                                                     (GateSignal.HELDOUT_LOGP,))


def test_a_resumed_run_keeps_the_best_held_out_log_prob_as_its_anchor(placed, tmp_path):
    trainer = start(placed, tmp_path, logp_tolerance=0.1)
    base = trainer.heldout_logp
    drifted(trainer)
    state = trainer.carry(RoundState())
    fresh = Trainer(TrainAlgorithm.DPO, trainer.gate_config, trainer.learner, [],  # no engines
                    trainer.checkpoints, trainer.served, trainer.accepted_checkpoint,
                    heldout=HELDOUT)
    fresh.resume(state)
    assert (state.best_heldout_logp, fresh.heldout_logp) == (base, base)
    assert fresh.measure_heldout() < base  # the served weights are the drifted ones


def test_a_rejected_update_restores_the_learner(placed, tmp_path):
    trainer = start(placed, tmp_path, logp_tolerance=0.1)
    accepted = trainer.heldout_logp
    trainer.gate(trainer.update(pairs(4, flipped=True)), validation(0.5))
    assert trainer.measure_heldout() == pytest.approx(accepted, abs=1e-5)


def test_a_collapse_rollback_serves_an_earlier_accepted_checkpoint_under_a_new_version(
        placed, tmp_path):
    trainer = start(placed, tmp_path)
    good = trainer.carry(RoundState())  # what served a round without collapse evidence
    served = served_text(placed[0]).text
    trainer.gate(trainer.update(pairs(2)), validation(0.5))  # accepted: the "collapsed" policy
    assert served_text(placed[0]).text != served
    rolled_to = trainer.roll_back(good.learner_checkpoint, good.weights_version, 0.25)
    after = served_text(placed[0])
    assert (rolled_to, after.text, after.weights_version, trainer.served_pass_at_1,
            trainer.accepted_checkpoint) == (good.weights_version, served, good.weights_version
                                             + 2, 0.25, good.learner_checkpoint)
    assert trainer.roll_back(good.learner_checkpoint, good.weights_version, 0.25) is None


def demonstrations(n):
    """The held-out solution itself, as the text after the prompt (what a warm start imitates)."""
    return [Demonstration(f"t{i}", PROMPT, HELDOUT[0][1], Role.SOLVER) for i in range(n)]


def test_an_sft_warm_start_is_served_and_kept_when_validation_holds(placed, tmp_path):
    trainer = start(placed, tmp_path)  # the rounds' gate leaves the log-prob signal off
    version = trainer.version
    published, stats = trainer.warm_start(demonstrations(4), 2, 1.0, Gate(0.05, 0.1), seed=0)
    before = trainer.heldout_logp  # measured first for the warm start's own gate
    outcome = trainer.gate(published, validation(0.5), Gate(0.05, 0.1))
    assert stats["steps"] == 4 and outcome.update is UpdateStatus.ACCEPTED
    assert outcome.gate_heldout_logp > before  # imitating the solution raised its log-prob
    assert served_text(placed[0]).weights_version == version + 1 == trainer.version


def test_an_sft_warm_start_that_lowers_pass_at_1_serves_the_base_weights_again(placed, tmp_path):
    trainer = start(placed, tmp_path)
    served = served_text(placed[0]).text
    published, _ = trainer.warm_start(demonstrations(4), 2, 1.0, Gate(0.05, None), seed=0)
    outcome = trainer.gate(published, validation(0.25), Gate(0.05, None))
    assert (outcome.update, outcome.rejected_by) == (UpdateStatus.REJECTED,
                                                     (GateSignal.PASS_AT_1,))
    assert served_text(placed[0]).text == served and trainer.learner.step() == 0
