"""The Recorder with a real trace store: what a round counts of the sandbox's re-runs, failures
and hack suspicions, and that a sandbox_error candidate is traced but never paired."""

import dataclasses
import sqlite3
from types import SimpleNamespace

import pytest

from spade_ray import stages
from spade_ray.execution import canonical
from spade_ray.preferences import read_jsonl
from spade_ray.preferences.generator import REJECTED_REWARD
from spade_ray.recorder import Recorder, round_line
from spade_ray.records import (
    Completion,
    ExecStatus,
    Limits,
    RoundState,
    SamplingParams,
    TaskFamily,
    TestOutcome,
    TestSuite,
)
from spade_ray.rollout.sampling import TokenMeter
from spade_ray.tasks.static import static_reason
from spade_ray.tasks.templates import load_prompts
from spade_ray.tracking import MetricsSink, TraceStore, Versions
from spade_ray.tracking.metrics import wandb_payload
from tests.scripted import run_scripted
from tests.tracking import factories as f


def solutions(count: int) -> stages.Solutions:
    task = f.task()
    candidates = tuple(
        dataclasses.replace(f.candidate(index=i), code=f"def f(x):\n    return {i}\n")
        for i in range(count))  # distinct programs: pairs need them
    return stages.Solutions((task,), ("p",), candidates, count, 0.0)


def rerun(check):
    return dataclasses.replace(check, execution=dataclasses.replace(check.execution, attempts=2))


def sandbox_error(check):
    return dataclasses.replace(check, passed=False, outcomes=(), execution=dataclasses.replace(
        check.execution, status=ExecStatus.SANDBOX_ERROR, exit_code=None, attempts=2))


@pytest.fixture
def record(tmp_path):
    store = TraceStore(tmp_path / "trace.sqlite", "run")
    sink = MetricsSink(tmp_path, "run", {}, wandb_mode="disabled")
    yield Recorder("run", tmp_path, store, sink).start_round(0, Versions(0, 0))
    sink.close()
    store.close()


def solved(record, checks):
    batch = solutions(len(checks))
    scored = stages.score(batch, checks, pair_margin=0.0, with_groups=False)
    record.executed(batch, checks)
    record.solved(batch, scored, generated=True)
    meters = {"generator": TokenMeter("generator"), "solver": TokenMeter("solver")}
    return scored, record.metrics(None, 0, None, meters, 1.0)


def test_a_round_counts_the_sandboxs_reruns_errors_and_hack_suspects(record):
    checks = [f.check(), rerun(f.check()), sandbox_error(f.check()),
              dataclasses.replace(f.check(passed=False), suspicion="read the grader's fd")]
    _, metrics = solved(record, checks)
    assert (metrics.sandbox_reruns, metrics.sandbox_errors, metrics.hack_suspects) == (2, 1, 1)


def test_a_sandbox_error_candidate_is_traced_but_never_paired(record, tmp_path):
    scored, _ = solved(record, [f.check(), f.check(passed=False), sandbox_error(f.check())])
    db = sqlite3.connect(tmp_path / "trace.sqlite")
    traced = db.execute("SELECT candidate_id FROM executions WHERE status='sandbox_error'")
    paired = {c for p in scored.pairs for c in (p.chosen_candidate_id, p.rejected_candidate_id)}
    assert traced.fetchall() == [("t0/2",)] and "t0/2" not in paired and scored.pairs


def test_a_flaky_tasks_candidates_are_traced_but_neither_paired_nor_rated(record, tmp_path):
    batch = solutions(3)
    checks = [f.check(), f.check(passed=False), f.check()]
    scored = stages.score(batch, checks, pair_margin=0.0, with_groups=True,
                          controls=stages.Controls(frozenset({"t0"}), cpu_s=0.5))
    assert (scored.pairs, scored.groups, scored.pass_rates) == ((), (), {})
    assert (scored.rated, scored.passed) == (0, 0) and len(scored.scores) == 3
    record.executed(batch, checks)
    record.solved(batch, scored, generated=True)
    meters = {"generator": TokenMeter("generator"), "solver": TokenMeter("solver")}
    metrics = record.metrics(None, 0, None, meters, 1.0)
    assert (metrics.flaky_tasks, metrics.pairs, metrics.new_task_candidates) == (1, 0, 0)
    assert metrics.sandbox_cpu_s == pytest.approx(3 * 0.0625 + 0.5, abs=1e-3)  # the control too
    assert "1 flaky tasks" in round_line(metrics)
    db = sqlite3.connect(tmp_path / "trace.sqlite")
    assert db.execute("SELECT COUNT(*) FROM executions").fetchone() == (3,)


def test_a_flaky_tasks_generator_output_is_rewarded_as_a_rejected_one():
    task = f.task()
    output = dataclasses.replace(f.generator_input(), outcome="admitted", task_id=task.task_id,
                                 executed=True, reward=None, pass_rate=None)
    (item,) = stages.reward_generator(chunk_with([output]), {task.task_id: 0.5},
                                      stages.GeneratorReward.BAND, 0, first_index=0,
                                      solver_version=0, with_groups=False,
                                      flaky=frozenset({task.task_id})).inputs
    assert (item.outcome, item.task_id, item.pass_rate, item.reward) == \
        ("flaky", task.task_id, None, REJECTED_REWARD)


def test_a_pass_rate_counts_every_draw_not_every_distinct_text():
    # Red-team pass 10: a solver right on 9 of 10 draws kept {right, wrong}: a pass rate of
    # 0.5, inside the band the generator's reward pays most for; it is 0.9.
    task = f.task()
    candidates = (dataclasses.replace(f.candidate(index=0), code="right", draws=9),
                  dataclasses.replace(f.candidate(index=1), code="wrong", draws=1))
    batch = stages.Solutions((task,), ("p",), candidates, 10, 0.0)
    checks = [f.check(passed=True), f.check(passed=False)]
    scored = stages.score(batch, checks, pair_margin=0.0, with_groups=False)
    assert scored.pass_rates == {task.task_id: 0.9} and (scored.rated, scored.passed) == (10, 9)
    assert len(scored.pairs) == 1  # the items to learn from stay one per distinct text


@pytest.mark.parametrize("wrong, split", [
    ((("passed", "passed", "failed"), ("passed", "passed", "failed")), True),  # one reading
    ((("passed", "passed", "failed"), ("passed", "failed", "passed")), False),  # two
    ((("failed", "passed", "failed"), ("failed", "passed", "failed")), False),  # unfit: it
    # fails what the prompt showed
    (((), ()), False),  # two crashes before the tests: no reading of the task
])
def test_a_program_task_split_between_two_readings_is_told(wrong, split):
    # Red-team pass 11: 'the middle element', shown on odd lengths and graded on even ones: a
    # solver picking between the two readings paid its generator 0.68 at K = 4 (it is the
    # predict coin flip with a program's verdicts for its answer: generator.behaviour)
    examples = tuple(canonical.example((x,), x // 2) for x in (3, 4, 6))
    task = dataclasses.replace(f.task(), tests=TestSuite(examples=examples, entry_point="f"),
                               visible=examples[:1])  # example[0] was shown
    candidates = tuple(dataclasses.replace(f.candidate(index=i), code=f"program {i}")
                       for i in range(4))
    right = dataclasses.replace(f.check(passed=True), outcomes=outcomes(("passed",) * 3))
    checks = [right, right] + [dataclasses.replace(f.check(passed=False), outcomes=outcomes(w))
                               for w in wrong]
    batch = stages.Solutions((task,), ("p",), candidates, 4, 0.0)
    scored = stages.score(batch, checks, pair_margin=0.0, with_groups=False)
    assert scored.pass_rates == {task.task_id: 0.5}
    assert scored.two_answers == ({task.task_id} if split else set())


def outcomes(verdicts) -> tuple[TestOutcome, ...]:
    return tuple(TestOutcome(f"example[{i}]", v, "", 0.001) for i, v in enumerate(verdicts))


def test_a_predict_task_whose_draws_guess_among_an_arguments_items_is_told():
    # red-team pass 12: xs[h % 4] of a 5-item list, h a scrambled hash no reader computes
    question = canonical.example(([4, 9, 15, 22, 31],), 9)
    task = dataclasses.replace(f.task(), family=TaskFamily.PREDICT, visible=(question,))
    candidates = tuple(dataclasses.replace(f.candidate(index=i), code=answer)
                       for i, answer in enumerate(["4", "9", "15", "22"]))
    batch = stages.Solutions((task,), ("p",), candidates, 4, 0.0)
    checks = [f.check(passed=answer == "9") for answer in ["4", "9", "15", "22"]]
    scored = stages.score(batch, checks, pair_margin=0.0, with_groups=False)
    assert scored.two_answers == {task.task_id} and scored.pass_rates == {task.task_id: 0.25}


def test_a_predict_task_whose_draws_guess_among_an_arguments_arrangements_is_told():
    # red-team pass 24: xs rotated by k, k a scrambled hash of a key no reader computes
    question = canonical.example(([6, 2, 8, 3], "lime"), [3, 6, 2, 8])
    task = dataclasses.replace(f.task(), family=TaskFamily.PREDICT, visible=(question,))
    answers = ["[6, 2, 8, 3]", "[3, 6, 2, 8]", "[8, 3, 6, 2]", "[2, 8, 3, 6]"]
    candidates = tuple(dataclasses.replace(f.candidate(index=i), code=answer)
                       for i, answer in enumerate(answers))
    batch = stages.Solutions((task,), ("p",), candidates, 4, 0.0)
    checks = [f.check(passed=answer == "[3, 6, 2, 8]") for answer in answers]
    scored = stages.score(batch, checks, pair_margin=0.0, with_groups=False)
    assert scored.two_answers == {task.task_id} and scored.pass_rates == {task.task_id: 0.25}


def test_a_predict_task_split_between_two_answers_pays_its_generator_no_band_reward(record):
    # a coin flip the solver cannot compute: half its draws right, half the one other answer
    # (sample_distinct keeps one copy of each text and counts its draws: red-team pass 10
    # found the guard dead when it counted kept texts, which never repeat)
    task = dataclasses.replace(f.task(), family=TaskFamily.PREDICT)
    candidates = tuple(dataclasses.replace(f.candidate(index=i), code=answer, draws=2)
                       for i, answer in enumerate(["7744", "7745"]))
    batch = stages.Solutions((task,), ("p",), candidates, 4, 0.0)
    checks = [f.check(passed=ok) for ok in (True, False)]
    scored = stages.score(batch, checks, pair_margin=0.0, with_groups=False)
    assert scored.two_answers == {task.task_id} and scored.pass_rates == {task.task_id: 0.5}
    assert (scored.rated, scored.passed) == (4, 2)
    record.executed(batch, checks)
    record.solved(batch, scored, generated=True)
    output = dataclasses.replace(f.generator_input(), task_id=task.task_id, family="predict",
                                 reward=None, pass_rate=None)
    (item,) = stages.reward_generator(chunk_with([output]), scored.pass_rates,
                                      stages.GeneratorReward.BAND, 0, first_index=0,
                                      solver_version=0, with_groups=False,
                                      split=scored.two_answers).inputs
    assert (item.outcome, item.pass_rate, item.reward) == ("admitted", 0.5, 0.0)
    record.new_tasks.append(task)
    meters = {"generator": TokenMeter("generator"), "solver": TokenMeter("solver")}
    metrics = record.metrics(None, 0, None, meters, 1.0)
    assert metrics.two_answer_tasks == 1
    assert "new-task pass 0.50 (1 split between two answers)" in round_line(metrics)


def test_a_round_with_no_new_task_has_no_new_task_pass_rate(record):
    # 0.0 there read as a round below the band: on the round line, in the report's band chart
    # and in W&B
    record.generated(chunk_with([dataclasses.replace(f.generator_input(), task_id=None,
                                                     outcome="reference_raises")]))
    meters = {"generator": TokenMeter("generator"), "solver": TokenMeter("solver")}
    metrics = record.metrics(None, 0, None, meters, 1.0)
    assert (metrics.new_task_candidates, metrics.new_task_pass_rate) == (0, None)
    assert "tasks 0/1 valid (rejected: reference_raises=1) | new-task pass n/a |" in round_line(
        metrics)
    assert "tasks/new_task_pass_rate" not in wandb_payload(metrics)


def chunk_with(items) -> stages.GeneratedChunk:
    return stages.GeneratedChunk(work=(("lists", "codegen"),), inputs=tuple(items), admitted=(),
                                 generate_s=0.0, validate_s=0.0)


def test_outputs_rejected_for_names_they_wrote_add_one_metric_key(record):
    # red-team pass 15, F8: 201 outputs with 201 free names made 201 W&B keys
    reasons = [static_reason(f"def f(x):\n    return x + ǅ{i}ﬁ_payload_{i}\n") for i in range(20)]
    record.generated(chunk_with(dataclasses.replace(f.generator_input(i), outcome=reason,
                                                    task_id=None)
                                for i, reason in enumerate(reasons)))
    meters = {"generator": TokenMeter("generator"), "solver": TokenMeter("solver")}
    metrics = record.metrics(None, 0, None, meters, 1.0)
    assert metrics.rejection_reasons == (("unbound", 20),)
    assert [k for k in wandb_payload(metrics) if k.startswith("rejections/")] == [
        "rejections/unbound"]


def test_generator_rewards_become_pairs_traced_with_their_role(record):
    task = f.task()
    good = dataclasses.replace(f.generator_input(), outcome="admitted", task_id=task.task_id,
                               executed=True, reward=None, pass_rate=None)
    bad = dataclasses.replace(f.generator_input(text="junk"), outcome="no_inputs",
                              task_id=None, executed=False, reward=None, pass_rate=None)
    rewards = stages.reward_generator(chunk_with([good, bad]), {task.task_id: 0.5},
                                      stages.GeneratorReward.BAND, 0, first_index=3,
                                      solver_version=0, with_groups=True)
    assert [(i.index, i.reward, i.pass_rate) for i in rewards.inputs] == [(3, 1.0, 0.5),
                                                                           (4, -1.0, None)]
    (pair,) = rewards.pairs
    assert (pair.chosen, pair.rejected, pair.role) == ("TASK ...", "junk", "generator")
    assert rewards.groups[0].rewards == (1.0, -1.0)
    record.rewarded(rewards)
    meters = {"generator": TokenMeter("generator"), "solver": TokenMeter("solver")}
    metrics = record.metrics(None, 0, None, meters, 1.0)
    assert (metrics.generator_pairs, metrics.pairs, metrics.pairs_from_generated) == (1, 1, 0)
    assert metrics.generator_reward_mean == 0.0 and metrics.family_tasks == (("codegen", 1),)
    db = sqlite3.connect(record.recorder.run_dir / "trace.sqlite")
    assert db.execute("SELECT role, chosen_candidate_id FROM pairs").fetchall() == \
        [("generator", "generator/r0/3")]
    assert db.execute("SELECT input_index, reward FROM generator_inputs ORDER BY 1").fetchall() \
        == [(3, 1.0), (4, -1.0)]


class ScriptedEngines:
    """Generates the texts it is given, in order (a stand-in for the model)."""

    weights_version = 0

    def __init__(self, texts):
        self.texts, self.prompts = list(texts), []

    def generate(self, prompts, sampling):
        self.prompts += prompts
        return SimpleNamespace(lost=[], completions=[
            [Completion(self.texts.pop(0), 5, 7, "stop", 0) for _ in range(sampling.n)]
            for _ in prompts])


def test_an_output_without_inputs_is_continued_from_the_inputs_frame():
    engines = ScriptedEngines(["3)\ntw(5)\n"])
    generation = stages.Generation(engines, load_prompts("fewshot")["generator"],
                                   SamplingParams(n=1), 2, 0.8, Limits(), frame_tokens=32)
    first = Completion("Description: Twice.\nReference:\ndef tw(x):\n    return 2 * x\n", 5, 7,
                       "stop", 0)
    groups = [[first]]
    generation.complete_frames(["P"], groups, TokenMeter("generator"))
    assert engines.prompts == ["P" + "Description: Twice.\nReference:\ndef tw(x):\n"
                                     "    return 2 * x\nInputs:\ntw("]
    assert groups[0][0].text.endswith("Inputs:\ntw(3)\ntw(5)\n")
    assert groups[0][0].completion_tokens == 14


def test_every_task_the_solver_attempts_is_in_the_trace(record):
    solved(record, [f.check(passed=True), f.check(passed=False)])
    db = sqlite3.connect(record.recorder.run_dir / "trace.sqlite")
    joined = db.execute("SELECT COUNT(*) FROM candidates c JOIN tasks t USING (task_id)")
    assert joined.fetchone()[0] == 2


def test_a_killed_rounds_pairs_leave_the_pairs_files_on_resume(tmp_path):
    # Red-team pass 11: a round killed after its first pairs kept them in pairs/round_001.jsonl
    # and in the dataset exported from it, though the trace discarded them, and its next
    # attempt appended its own.
    store = TraceStore(tmp_path / "trace.sqlite", "run")
    sink = MetricsSink(tmp_path, "run", {}, wandb_mode="disabled")
    recorder = Recorder("run", tmp_path, store, sink)
    for index in (0, 1):
        record = recorder.start_round(index, Versions(0, 0))
        record._add_pairs([f.pair(f"t{index}")], [])
        record.export_pairs()
        if index == 0:
            recorder.complete(f.metrics(0), RoundState())
    assert store.pairs(1)  # the killed attempt's row
    assert recorder.resume(rounds=3)[0] == 1 and not store.pairs(1)
    assert sorted(p.name for p in (tmp_path / "pairs").iterdir()) == ["round_000",
                                                                      "round_000.jsonl"]
    record = recorder.start_round(1, Versions(0, 0))
    record._add_pairs([f.pair("t2")], [])
    assert [p.task_id for p in read_jsonl(record.pairs_file)] == ["t2"]
    sink.close()
    store.close()


def test_a_batch_whose_scoring_fails_keeps_its_candidates_and_executions(sandbox, tmp_path,
                                                                         monkeypatch):
    # Red-team pass 11: candidates and executions were written after scoring, so a scorer that
    # raised left the sampled and executed batch nowhere in the trace.
    def fails(*_args, **_kwargs):
        raise ValueError("the scorer broke")

    monkeypatch.setattr(stages, "score", fails)
    (metrics,), _, _ = run_scripted(sandbox, tmp_path, "healthy", rounds=1)
    db = sqlite3.connect(tmp_path / "trace.sqlite")
    counts = {table: db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
              for table in ("candidates", "executions", "scores")}
    assert counts["candidates"] == counts["executions"] > 0 and counts["scores"] == 0
    assert any(reason.startswith("stage_failed:solve:ValueError")
               for reason, _ in metrics.rejection_reasons)
