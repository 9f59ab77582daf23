"""`spade-ray diagnose RUN_DIR`: walk a run's trace stage by stage and say what looks wrong.

Scope: a pure function over a run directory (trace.sqlite read through query.py's read-only
connection, metrics.jsonl) that returns a typed `Diagnosis`: per section, counts with one or two
examples each (ids and a one-line excerpt), and checks with a verdict (OK, WARN, FAIL) and why.
  1. tasks        generator outputs by outcome and family; task rows, valid or why not
  2. candidates   each candidate's class: passed, wrong answer, syntax / runtime error, a limit,
                  killed, sandbox_error, suspected hack (what the grader saw comes first)
  3. environment  the limits in use, env_hash per round, sandbox errors and re-runs
  4. evaluator    every recorded score against the scorer re-run on its execution row; with
                  `recheck` N, N sampled candidates re-executed in a sandbox and compared
  5. training     pair order (the evaluator's `compare`), recorded pair scores, duplicates,
                  chosen sides that did not pass, role / family balance, task distribution shift
A FAIL is a broken guarantee of the pipeline (a gate fails on it: `exit_code` 1); a WARN is
worth a look but may be legitimate (a weak model, an environment upgrade).
Non-goals: repairing a trace, judging the model's quality, plots (plots.py), ad-hoc queries
(query.py); traces of several runs in one file are diagnosed one run id at a time.

This module is the entry point (`load_run`, `diagnose`, and the two outputs that cli.py prints);
the parts, one job each: diagnose_findings.py (the typed findings), diagnose_run.py (reading a
run), diagnose_outputs.py (sections 1-2), diagnose_execution.py (3-4), diagnose_training.py (5),
diagnose_format.py (text and JSON).
"""

from __future__ import annotations

from spade_ray.execution import Executor
from spade_ray.tracking.diagnose_execution import environment_section, evaluator_section
from spade_ray.tracking.diagnose_findings import (
    Check,
    CheckName,
    Count,
    Diagnosis,
    Example,
    FailureClass,
    Level,
    Section,
)
from spade_ray.tracking.diagnose_format import diagnosis_json, format_diagnosis
from spade_ray.tracking.diagnose_outputs import candidates_section, classify, tasks_section
from spade_ray.tracking.diagnose_run import RunTrace, load_run
from spade_ray.tracking.diagnose_training import training_section

__all__ = ["Check", "CheckName", "Count", "Diagnosis", "Example", "FailureClass", "Level",
           "RunTrace", "Section", "classify", "diagnose", "diagnosis_json", "format_diagnosis",
           "load_run"]


def diagnose(trace: RunTrace, recheck: int = 0, executor: Executor | None = None,
             seed: int = 0) -> Diagnosis:
    """The five sections; `recheck` N > 0 re-executes N candidates (sampled with `seed`)."""
    if recheck < 0:
        raise ValueError(f"recheck={recheck}: give a number of candidates >= 0")
    if recheck and executor is None:
        raise ValueError("re-executing candidates needs an executor (a Sandbox)")
    sections = (tasks_section(trace), candidates_section(trace), environment_section(trace),
                evaluator_section(trace, recheck, executor, seed), training_section(trace))
    return Diagnosis(str(trace.run_dir), trace.run_id, trace.rounds, trace.completed,
                     trace.metrics, sections)
