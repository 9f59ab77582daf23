"""Section 5 of `spade-ray diagnose` (see diagnose.py): the training data.
  pair order (the evaluator's `compare`; FAIL when a chosen side does not rank above), recorded
  pair scores against their candidate's score or output's reward (FAIL), duplicate pairs (FAIL in
  one round, WARN across rounds), solver pairs whose chosen side did not pass, role / family
  balance per round, and task distribution shift between rounds (WARN past SHIFT_WARN_TV)
Non-goals: rebuilding pairs (preferences/), judging whether the data will train well.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence

from spade_ray.evaluation import IncomparableScores, SandboxFailure, compare
from spade_ray.records import PreferencePair, Role
from spade_ray.tracking.diagnose_findings import (
    EXAMPLES,
    Check,
    CheckName,
    Example,
    Level,
    Section,
    group_counts,
    one_line,
)
from spade_ray.tracking.diagnose_run import RunTrace
from spade_ray.tracking.schema import GeneratorInput

# Total-variation distance between two rounds' task histograms above which more than half the
# mass moved: worth a look (a collapsing generator, a family that stopped being admitted).
SHIFT_WARN_TV = 0.5


def training_section(trace: RunTrace) -> Section:
    duplicates, duplicate_check = _duplicates(trace.pairs)
    not_passed = [(r, p) for r, p in trace.pairs if p.role is Role.SOLVER
                  and (r, p.chosen_candidate_id) in trace.scores
                  and not trace.scores[(r, p.chosen_candidate_id)].passed]
    counts = group_counts((f"{p.role.value} pairs", _pair_example(r, p)) for r, p in trace.pairs)
    counts += group_counts(("duplicate pairs", e) for e in duplicates)
    counts += group_counts(("chosen did not pass (solver)", _pair_example(r, p))
                           for r, p in not_passed)
    shift_notes, shift_check = _shift(trace)
    checks = (_order_check(trace), _pair_scores_check(trace), duplicate_check, shift_check)
    return Section("training", "Training data", counts, _balance(trace) + shift_notes, checks)


def _pair_example(round: int, p: PreferencePair) -> Example:
    return Example(f"r{round} {p.chosen_candidate_id} > {p.rejected_candidate_id}",
                   f"{p.chosen_score:.3g} > {p.rejected_score:.3g}: {one_line(p.chosen, 50)}")


def _output_ids(trace: RunTrace) -> dict[str, GeneratorInput]:
    # A generator pair's candidate ids name generator outputs: generator/r<round>/<index>.
    return {f"generator/r{r}/{o.index}": o for r, o in trace.inputs}


def _order_check(trace: RunTrace) -> Check:
    bad = []
    for r, p in trace.pairs:
        chosen = trace.scores.get((r, p.chosen_candidate_id))
        rejected = trace.scores.get((r, p.rejected_candidate_id))
        if p.role is Role.SOLVER and chosen and rejected:
            try:  # the evaluator's order: value, passed, then efficiency when both pass
                above, why = compare(chosen, rejected) > 0, "the evaluator ranks it lower or equal"
            except (SandboxFailure, IncomparableScores) as e:
                above, why = False, str(e)
        else:
            above, why = p.chosen_score > p.rejected_score, "its score is not higher"
        if not above:
            bad.append(Example(_pair_example(r, p).id, one_line(why)))
    return Check(CheckName.PAIR_ORDER, Level.FAIL if bad else Level.OK,
                 f"{len(trace.pairs) - len(bad)} of {len(trace.pairs)} pairs have a chosen side "
                 "that ranks strictly above the rejected side", tuple(bad[:EXAMPLES]))


def _pair_scores_check(trace: RunTrace) -> Check:
    outputs = _output_ids(trace)

    def recorded(r: int, cid: str, role: Role) -> float | None:
        if role is Role.GENERATOR:
            return outputs[cid].reward if cid in outputs else None
        return trace.scores[(r, cid)].value if (r, cid) in trace.scores else None

    bad = []
    for r, p in trace.pairs:
        for side, cid, value in (("chosen", p.chosen_candidate_id, p.chosen_score),
                                 ("rejected", p.rejected_candidate_id, p.rejected_score)):
            found = recorded(r, cid, p.role)
            if found is None or not math.isclose(found, value, abs_tol=1e-9):
                bad.append(Example(f"r{r} {cid}", f"pair's {side} score {value:.3g}, its record "
                                   f"{'missing' if found is None else f'{found:.3g}'}"))
    return Check(CheckName.PAIR_SCORES, Level.FAIL if bad else Level.OK,
                 f"{len(bad)} pair sides differ from their candidate's score or output's reward "
                 f"({len(trace.pairs)} pairs)", tuple(bad[:EXAMPLES]))


def _duplicates(pairs: Sequence[tuple[int, PreferencePair]]) -> tuple[list[Example], Check]:
    first: dict[tuple[str, str, str], tuple[int, PreferencePair]] = {}
    found, same_round = [], 0
    for r, p in pairs:
        key = (p.prompt, p.chosen, p.rejected)
        if key in first:
            r0, p0 = first[key]
            same_round += r0 == r
            found.append(Example(_pair_example(r, p).id, f"repeats r{r0} "
                                 f"{p0.chosen_candidate_id} > {p0.rejected_candidate_id}"))
        else:
            first[key] = (r, p)
    if same_round:
        level, why = Level.FAIL, f"{same_round} pairs repeat a pair of their own round"
    elif found:
        level, why = Level.WARN, (f"{len(found)} pairs repeat a pair of an earlier round (a "
                                  "replayed task sampled the same programs)")
    else:
        level, why = Level.OK, f"{len(pairs)} distinct (prompt, chosen, rejected) pairs"
    return found, Check(CheckName.DUPLICATES, level, why, tuple(found[:EXAMPLES]))


def _balance(trace: RunTrace) -> tuple[str, ...]:
    known, outputs = trace.known_tasks(), _output_ids(trace)
    per_round: dict[int, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
    for r, p in trace.pairs:
        if p.role is Role.GENERATOR:
            family = outputs[p.chosen_candidate_id].family if p.chosen_candidate_id in outputs \
                else "?"
        else:
            family = known[p.task_id].family.value if p.task_id in known else "?"
        per_round[r][p.role.value][family] += 1
    return tuple(f"round {r} pairs: " + "; ".join(
        f"{role} {fams.total()} ({', '.join(f'{f} {n}' for f, n in sorted(fams.items()))})"
        for role, fams in sorted(roles.items())) for r, roles in sorted(per_round.items()))


def _shift(trace: RunTrace) -> tuple[tuple[str, ...], Check]:
    """Total-variation distance of each round's task family / topic histogram vs the previous
    round's; a round's tasks are its valid task rows and the tasks its candidates attempted."""
    known = trace.known_tasks()
    tasks: dict[int, set[str]] = defaultdict(set)
    for r, t in trace.tasks:
        if t.valid:
            tasks[r].add(t.task.task_id)
    for r, c in trace.candidates:
        if c.task_id in known:
            tasks[r].add(c.task_id)
    notes, large = [], []
    rounds = sorted(tasks)
    for before, now in zip(rounds, rounds[1:]):
        distances = {what: _tv(Counter(get(known[t]) for t in tasks[before]),
                               Counter(get(known[t]) for t in tasks[now]))
                     for what, get in (("family", lambda t: t.family.value),
                                       ("topic", lambda t: t.topic))}
        text = ", ".join(f"{what} TV {d:.2f}" for what, d in distances.items())
        notes.append(f"round {now} vs {before}: {text} ({len(tasks[now])} tasks)")
        if max(distances.values()) > SHIFT_WARN_TV:
            large.append(Example(f"round {now}", text))
    if large:
        return tuple(notes), Check(CheckName.SHIFT, Level.WARN, f"{len(large)} round(s) moved "
                                   f"more than {SHIFT_WARN_TV:.0%} of the task mass",
                                   tuple(large[:EXAMPLES]))
    return tuple(notes), Check(CheckName.SHIFT, Level.OK, f"no round moved more than "
                               f"{SHIFT_WARN_TV:.0%} of the task mass")


def _tv(p: Counter[str], q: Counter[str]) -> float:
    if not p.total() or not q.total():
        return 0.0
    return 0.5 * sum(abs(p[k] / p.total() - q[k] / q.total()) for k in p.keys() | q.keys())

