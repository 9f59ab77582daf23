"""The two outputs of `spade-ray diagnose` (see diagnose.py): the human-readable report and one
JSON object (the Diagnosis as data, plus its exit code).

Scope: formatting a finished Diagnosis, every line through `query.printable` (red-team pass 15,
F2: model text must not reach the operator's terminal as control sequences). Non-goals: deciding
any verdict, printing (cli.py does).
"""

from __future__ import annotations

import json

from spade_ray.records import to_dict
from spade_ray.tracking.diagnose_findings import Diagnosis, Level, round_span
from spade_ray.tracking.query import printable


def format_diagnosis(d: Diagnosis) -> str:
    """The human-readable report: header, metrics, five sections, one verdict line."""
    out = [f"diagnose {d.run_dir}: run {d.run_id}, rounds {round_span(d.rounds) or 'none'} "
           f"({len(d.completed)} completed)"]
    if d.metrics:
        out.append("Metrics (metrics.jsonl)")
        out += [f"  round {m.round}: update {m.update.value}, pass@1 "
                f"{'-' if m.validation_pass_at_1 is None else f'{m.validation_pass_at_1:.3f}'} "
                f"on {m.validation_problems} problems, admitted {m.tasks_valid}/"
                f"{m.tasks_proposed}" for m in d.metrics]
    for number, section in enumerate(d.sections, start=1):
        out.append(f"{number}. {section.title}")
        for count in section.counts:
            out.append(f"  {count.label:<32} {count.count:>5}")
            out += [f"      {e.id}: {e.excerpt}" for e in count.examples]
        out += [f"  - {note}" for note in section.notes]
        for check in section.checks:
            out.append(f"  {check.level.value:<4}  {check.name.value}: {check.why}")
            out += [f"        {e.id}: {e.excerpt}" for e in check.examples]
    failed = [c.name.value for c in d.checks if c.level is Level.FAIL]
    warned = sum(c.level is Level.WARN for c in d.checks)
    out.append(f"verdict: {'FAIL' if failed else 'OK'} ({len(d.checks)} checks, "
               f"{len(failed)} failed, {warned} warnings)" + (f": {'; '.join(failed)}"
                                                            if failed else ""))
    # Each entry is one line, and ids, labels, reasons and notes hold model or trace text too
    # (an outcome names a free variable, a topic): a terminal acts on none of it (F2).
    return "\n".join(map(printable, out))


def diagnosis_json(d: Diagnosis) -> str:
    return json.dumps({**to_dict(d), "exit_code": d.exit_code})
