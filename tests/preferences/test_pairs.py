"""Preference pairs from scored candidates, and their export (JSONL, `datasets`, TRL)."""

import dataclasses
import math

import pytest
import torch

from spade_ray.evaluation.scoring import score_many
from spade_ray.execution import Sandbox
from spade_ray.learner.losses import group_advantages
from spade_ray.preferences.export import (
    TRL_COLUMNS,
    append_jsonl,
    read_jsonl,
    save_dataset,
)
from spade_ray.preferences.pairs import build_groups, build_pairs
from spade_ray.records import (
    Candidate,
    ExecStatus,
    Limits,
    PreferencePair,
    Score,
    Task,
    TestSuite,
)

TESTS = TestSuite(asserts=("assert add(1, 2) == 3", "assert add(0, 0) == 0",
                           "assert add(-2, 1) == -1"))
TASK = Task(task_id="t", family="codegen", topic="arithmetic", description="Add two numbers.",
            entry_point="add", signature="def add(a, b):", tests=TESTS,
            reference="def add(a, b):\n    return a + b\n", generator_version=3)
PROMPT = "Write add(a, b).\n"
CORRECT = "def add(a, b):\n    return a + b\n"
PARTIAL = "def add(a, b):\n    return a + b if a >= 0 else 0\n"
WRONG = "def add(a, b):\n    return a - b - 1\n"


def candidate(code: str, index: int, solver_version: int = 7) -> Candidate:
    return Candidate(candidate_id=f"t/{index}", task_id="t", code=code,
                     solver_version=solver_version, prompt_tokens=5, completion_tokens=9)


def made_score(index: int, value: float, passed: bool = False, cpu_s: float = 0.01,
               status: ExecStatus = ExecStatus.OK) -> Score:
    return Score(candidate_id=f"t/{index}", task_id="t", value=value, passed=passed,
                 tests_passed=round(3 * value), tests_total=3, status=status, cpu_s=cpu_s,
                 peak_memory_mb=10.0)


def pairs_of(codes_scores, margin=0.0):
    candidates = [candidate(code, i) for i, (code, _) in enumerate(codes_scores)]
    scores = [dataclasses.replace(s, candidate_id=f"t/{i}")
              for i, (_, s) in enumerate(codes_scores)]
    return build_pairs(TASK, PROMPT, candidates, scores, generator_version=3, margin=margin)


def ids(pairs):
    return [(p.chosen_candidate_id, p.rejected_candidate_id) for p in pairs]


def sample_pairs() -> list[PreferencePair]:
    return pairs_of([(CORRECT, made_score(0, 1.0, True)), (PARTIAL, made_score(0, 2 / 3)),
                     (WRONG, made_score(0, 0.0))])


def test_pairs_from_a_real_sandbox_order_chosen_above_rejected():
    codes = [WRONG, CORRECT, PARTIAL]
    candidates = [candidate(code, i) for i, code in enumerate(codes)]
    with Sandbox(backend="local", limits=Limits(timeout_s=2.0, cpu_s=2.0), workers=2) as sb:
        scores = score_many(candidates, sb.check_many(codes, [TESTS] * 3))
    pairs = build_pairs(TASK, PROMPT, candidates, scores, generator_version=3)
    assert ids(pairs) == [("t/1", "t/0"), ("t/1", "t/2"), ("t/2", "t/0")]
    assert all(p.chosen_score > p.rejected_score for p in pairs)


def test_margin_drops_wins_smaller_than_it():
    assert ids(pairs_of([(CORRECT, made_score(0, 1.0, True)), (PARTIAL, made_score(0, 2 / 3)),
                         (WRONG, made_score(0, 0.0))], margin=0.5)) == [("t/0", "t/2"),
                                                                        ("t/1", "t/2")]


def test_efficiency_only_wins_count_only_at_margin_zero():
    fast_slow = [(CORRECT, made_score(0, 1.0, True, cpu_s=0.002)),
                 ("def add(a, b):\n    return sum((a, b))\n", made_score(0, 1.0, True, cpu_s=0.5))]
    assert ids(pairs_of(fast_slow)) == [("t/0", "t/1")]
    assert pairs_of(fast_slow, margin=0.1) == []


def test_equal_candidates_make_no_pair():
    assert pairs_of([(CORRECT, made_score(0, 1.0, True)),
                     ("def add(a, b):\n    return b + a\n", made_score(0, 1.0, True))]) == []


def test_code_identical_up_to_whitespace_is_never_paired():
    # Scored differently (e.g. a flaky run), but the same program: no signal to learn from.
    spaced = "def add(a, b):\n\n    return a  +  b   \n"
    assert pairs_of([(CORRECT, made_score(0, 1.0, True)), (spaced, made_score(0, 0.0))]) == []


def test_code_that_differs_in_indentation_is_another_program():
    right = "def first(xs):\n    for x in xs:\n        return x\n    return None\n"
    wrong = right.replace("        return x", "    return x")
    pairs = pairs_of([(right, made_score(0, 1.0, True)), (wrong, made_score(0, 0.0))])
    assert ids(pairs) == [("t/0", "t/1")]


def test_duplicate_candidates_give_one_pair_per_distinct_text_pair():
    pairs = pairs_of([(CORRECT, made_score(0, 1.0, True)), (CORRECT, made_score(0, 1.0, True)),
                      (WRONG, made_score(0, 0.0))])
    assert ids(pairs) == [("t/0", "t/2")]


def test_sandbox_errors_are_left_out():
    pairs = pairs_of([(CORRECT, made_score(0, 1.0, True)),
                      (WRONG, made_score(0, 0.0, status=ExecStatus.SANDBOX_ERROR))])
    assert pairs == []


def test_pairs_carry_the_prompt_code_and_versions():
    (pair,) = pairs_of([(CORRECT, made_score(0, 1.0, True)), (WRONG, made_score(0, 0.0))])
    assert (pair.prompt, pair.chosen, pair.rejected) == (PROMPT, CORRECT, WRONG)
    assert (pair.solver_version, pair.generator_version, pair.task_id) == (7, 3, "t")


def test_a_base_model_pair_has_its_signature_once_for_trl_and_for_us():
    # The prompt ends with the signature each program starts with: prompt + chosen is what the
    # model saw and wrote, with the signature once (the TRL export concatenates them).
    prompt = "### Task\nAdd two numbers.\ndef add(a, b):\n"
    candidates = [candidate(CORRECT, 0), candidate(WRONG, 1)]
    scores = [made_score(0, 1.0, True), dataclasses.replace(made_score(0, 0.0), candidate_id="t/1")]
    (pair,) = build_pairs(TASK, prompt, candidates, scores, generator_version=3)
    assert pair.prompt == "### Task\nAdd two numbers.\n"
    assert (pair.prompt + pair.chosen).count("def add(a, b):") == 1
    (group,) = build_groups(TASK, prompt, candidates, scores)
    assert group.prompt == pair.prompt
    # one candidate that does not start with the signature: no one's context is cut
    odd = [candidate(CORRECT, 0), candidate("add = lambda a, b: a + b\n", 1)]
    assert build_groups(TASK, prompt, odd, scores)[0].prompt == prompt


def test_a_group_counts_each_program_once_per_draw():
    # The solver keeps one copy of a repeated text (Candidate.draws). Right on 3 of 4 draws is a
    # group of 4 as GRPO sampled it: the wrong draw's advantage is -1.5, not the -0.71 of a
    # {right, wrong} group that would push the rare text down no harder than the common one up.
    candidates = [dataclasses.replace(candidate(CORRECT, 0), draws=3), candidate(WRONG, 1)]
    scores = [made_score(0, 1.0, True), made_score(1, 0.0)]
    (group,) = build_groups(TASK, PROMPT, candidates, scores)
    assert group.completions == (CORRECT, CORRECT, CORRECT, WRONG)
    assert group.rewards == (1.0, 1.0, 1.0, 0.0)
    advantages = group_advantages(torch.tensor([group.rewards]))[0].tolist()
    assert advantages[3] == pytest.approx(-1.5, abs=1e-3)
    assert advantages[0] == pytest.approx(0.5, abs=1e-3)
    # one text, however often drawn, has no group to be relative to
    assert build_groups(TASK, PROMPT, candidates[:1], scores[:1]) == []


def test_candidates_from_several_solver_versions_are_an_error():
    candidates = [candidate(CORRECT, 0, solver_version=1), candidate(WRONG, 1, solver_version=2)]
    with pytest.raises(ValueError, match="solver versions"):
        build_pairs(TASK, PROMPT, candidates, [made_score(0, 1.0, True), made_score(1, 0.0)], 3)


def test_scores_out_of_candidate_order_are_an_error():
    candidates = [candidate(CORRECT, 0), candidate(WRONG, 1)]
    with pytest.raises(ValueError, match="candidate order"):
        build_pairs(TASK, PROMPT, candidates, [made_score(1, 0.0), made_score(0, 1.0, True)], 3)


def test_jsonl_round_trips_across_appends(tmp_path):
    pairs = sample_pairs()
    path = tmp_path / "pairs" / "round_000.jsonl"
    append_jsonl(path, pairs[:1])
    append_jsonl(path, pairs[1:])
    assert read_jsonl(path) == pairs


def test_a_partial_last_line_from_a_killed_writer_is_ignored_then_cut(tmp_path):
    pairs = sample_pairs()
    path = tmp_path / "round.jsonl"
    append_jsonl(path, pairs)
    whole = path.read_bytes()
    path.write_bytes(whole[:-40])  # what a writer killed inside its last line leaves
    assert read_jsonl(path) == pairs[:-1]
    assert append_jsonl(path, pairs[-1:]) > 0
    assert read_jsonl(path) == pairs and path.read_bytes() == whole


def test_a_broken_line_before_the_last_is_corruption(tmp_path):
    path = tmp_path / "round.jsonl"
    append_jsonl(path, sample_pairs())
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join([lines[0], b"{not json", *lines[1:]]))
    with pytest.raises(ValueError, match=r"round.jsonl:2 .*corrupt"):
        read_jsonl(path)


def test_saved_dataset_loads_with_the_trl_columns(tmp_path):
    import datasets

    pairs = sample_pairs()
    loaded = datasets.load_from_disk(str(save_dataset(pairs, tmp_path / "round_000")))
    assert set(TRL_COLUMNS) <= set(loaded.column_names)
    assert loaded["chosen"] == [p.chosen for p in pairs]
    assert loaded["rejected_candidate_id"] == [p.rejected_candidate_id for p in pairs]


def test_saving_again_replaces_the_dataset(tmp_path):
    import datasets

    target = tmp_path / "round_000"
    save_dataset(sample_pairs(), target)
    save_dataset(sample_pairs()[:1], target)
    assert datasets.load_from_disk(str(target)).num_rows == 1
    assert [p.name for p in tmp_path.iterdir()] == ["round_000"]  # no temp dirs left behind


def test_a_round_without_pairs_still_has_the_trl_columns(tmp_path):
    import datasets

    loaded = datasets.load_from_disk(str(save_dataset([], tmp_path / "empty")))
    assert loaded.num_rows == 0 and set(TRL_COLUMNS) <= set(loaded.column_names)


def test_trl_dpo_trainer_takes_a_step_on_the_dataset(tmp_path, tiny_model):
    trl = pytest.importorskip("trl")
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dataset = datasets.load_from_disk(str(save_dataset(sample_pairs(), tmp_path / "ds")))
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    config = trl.DPOConfig(output_dir=str(tmp_path / "out"), max_steps=1,
                           per_device_train_batch_size=2, report_to=[], save_strategy="no",
                           logging_steps=1, use_cpu=True)
    trainer = trl.DPOTrainer(model=model, args=config, train_dataset=dataset,
                             processing_class=tokenizer)
    output = trainer.train()
    assert output.global_step == 1 and math.isfinite(output.training_loss)
