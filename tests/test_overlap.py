"""loop.overlap in real rounds driven by scripted models (tests/scripted.py): the update on round
r's items runs while round r+1 generates, every rollout comes from weights the gate kept, and a
run stopped in an overlapped round trains the pending items exactly once when it resumes."""

import json

import pytest

from spade_ray.execution import Sandbox
from tests.scripted import LIMITS, ScriptedTrainer, run_scripted

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(limits=LIMITS, workers=2) as sb:
        yield sb


def trained_ids(items):
    return sorted((p.role, p.chosen_candidate_id, p.rejected_candidate_id) for p in items)


def round_pairs(run_dir, index):
    """The pairs a round exported (pairs/round_NNN.jsonl), as trained_ids compares them."""
    rows = [json.loads(line) for line in
            (run_dir / "pairs" / f"round_{index:03d}.jsonl").read_text().splitlines()]
    return sorted((r["role"], r["chosen_candidate_id"], r["rejected_candidate_id"])
                  for r in rows)


def test_each_update_trains_on_the_round_before_it_while_the_next_round_generates(
        sandbox, tmp_path):
    metrics, trainer, _ = run_scripted(sandbox, tmp_path, "healthy", rounds=3, overlap=True)
    assert [m.update for m in metrics] == ["buffering", "accepted", "accepted"]
    assert [m.trained_round for m in metrics] == [None, 0, 1]
    # round r samples with the weights the gate kept at the end of round r-1, never newer
    assert [m.solver_version for m in metrics] == [0, 0, 1]
    assert [trained_ids(items) for items in trainer.trained] == [
        round_pairs(tmp_path, 0), round_pairs(tmp_path, 1)]
    assert all(m.pairs > 0 for m in metrics)


def test_without_overlap_each_round_trains_on_its_own_items(sandbox, tmp_path):
    metrics, trainer, _ = run_scripted(sandbox, tmp_path, "healthy", rounds=2)
    assert [m.trained_round for m in metrics] == [0, 1]
    assert [m.solver_version for m in metrics] == [0, 1]
    assert [trained_ids(items) for items in trainer.trained] == [
        round_pairs(tmp_path, 0), round_pairs(tmp_path, 1)]


def test_a_collapse_alarm_drops_the_items_the_collapsing_policy_wrote(sandbox, tmp_path):
    metrics, trainer, generator = run_scripted(sandbox, tmp_path, "collapsed", rounds=4,
                                               overlap=True)
    # round 1 still samples the base weights; the update on round 0's items serves the
    # collapsed ones from round 2 on, whose evidence raises the alarm
    alarmed = [m.round for m in metrics if m.collapse_alarm]
    assert alarmed == [2] and metrics[2].generator_rollback is not None
    assert [m.trained_round for m in metrics] == [None, 0, 1, None]  # round 2's items dropped
    assert len(trainer.trained) == 2 and generator.weights == "healthy"


class DiesInUpdate(ScriptedTrainer):
    """Stops the run in its first update, as a kill -9 would mid-round."""

    def finish_update(self, items):
        raise SystemExit("killed mid-round")


def test_a_run_stopped_mid_round_trains_the_pending_items_once_when_resumed(sandbox,
                                                                            tmp_path):
    run_scripted(sandbox, tmp_path, "healthy", rounds=2, overlap=True)  # rounds 0, 1 complete
    dying = DiesInUpdate([], "healthy")
    with pytest.raises(SystemExit):
        run_scripted(sandbox, tmp_path, "healthy", rounds=3, trainer=dying, overlap=True)
    resumed = ScriptedTrainer([], "healthy")
    metrics, _, _ = run_scripted(sandbox, tmp_path, "healthy", rounds=3, trainer=resumed,
                                 overlap=True)
    assert [m.round for m in metrics] == [0, 1, 2]
    # round 1's items, read back from the completed round's state, trained exactly once
    assert [trained_ids(items) for items in resumed.trained] == [round_pairs(tmp_path, 1)]
    assert metrics[2].trained_round == 1
