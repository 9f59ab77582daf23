"""Typed records passed between the stages of spade-ray, with a JSON round trip.

Every record is a frozen dataclass; units are in the field names. `to_dict` / `from_dict`
(serial.py) are the one serialisation path (trace store, Ray, CLI `--json`), so a record read
back equals the record written. items.py holds what the stages pass one another (tasks,
executions, candidates, scores, training items), rounds.py what learning and a round record
(the learner's settings, an update's outcome, a round's metrics and state). Import them from
here: `from spade_ray.records import Task`.
"""

from spade_ray.records.items import (
    Candidate,
    CheckResult,
    Completion,
    CompletionGroup,
    Demonstration,
    ExecResult,
    ExecStatus,
    IOExample,
    Limits,
    PreferencePair,
    Role,
    SamplingParams,
    Score,
    Task,
    TaskFamily,
    TaskSource,
    TestOutcome,
    TestSuite,
    Verdict,
)
from spade_ray.records.rounds import (
    Critic,
    GateSignal,
    KLMode,
    LearnerParams,
    LearnOutcome,
    RoundMetrics,
    RoundState,
    TrainAlgorithm,
    UpdateStatus,
    WarmStart,
)
from spade_ray.records.serial import from_dict, to_dict

__all__ = [
    "Candidate", "CheckResult", "Completion", "CompletionGroup", "Critic", "Demonstration",
    "ExecResult", "ExecStatus", "GateSignal", "IOExample", "KLMode", "LearnOutcome",
    "LearnerParams", "Limits", "PreferencePair", "Role", "RoundMetrics", "RoundState",
    "SamplingParams", "Score", "Task", "TaskFamily", "TaskSource", "TestOutcome", "TestSuite",
    "TrainAlgorithm", "UpdateStatus", "Verdict", "WarmStart", "from_dict", "to_dict",
]
