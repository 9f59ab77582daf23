"""Rollouts that overlap the update (loop.overlap) against the sequential round, in one run: the
same experiment twice, one run after the other on the same machine, then per mode the round
wall time, the fractions of it the engines and the learner were busy, and the ratio of the
round wall time to its slowest stage (engines, learner, or sandbox; target <= 1.25 with overlap,
where the sequential round is about the sum of its stages).

Round 0 is left out of the means: with overlap it has no update to hide (the first update trains
on round 0's items during round 1). The engines' busy time is the time a generate call was in
flight (RoleEngines.busy_s: generation, solving and validation), the learner's its own time in
the update, the sandbox's the round's execute and task-admission stage time.

    .venv/bin/python bench/overlap.py [--rounds 3] [--experiment cpu_gemma] [OVERRIDE ...]

OVERRIDEs are Hydra overrides given to both runs (e.g. a smaller loop.caps.wall_s for a
shorter benchmark).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

SPADE_RAY = str(Path(sys.executable).parent / "spade-ray")
SANDBOX_STAGES = ("execute", "validate_tasks")


def run(root: Path, name: str, experiment: str, rounds: int, overrides: list[str]
        ) -> list[dict]:
    """One run's metrics rows; the run's own output goes to ROOT/NAME.log."""
    command = [SPADE_RAY, "run", f"experiment={experiment}", f"run_root={root}",
               f"run_name={name}", f"loop.rounds={rounds}", "wandb.mode=disabled", *overrides]
    with open(root / f"{name}.log", "w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode:
        sys.exit(f"{name}: `{' '.join(command)}` failed ({done.returncode}); see {log.name}")
    return [json.loads(line) for line in (root / name / "metrics.jsonl").read_text().splitlines()]


def stages(row: dict) -> dict[str, float]:
    stage_s = dict(row["stage_s"])
    return {"engines": row["engine_busy_s"], "learner": row["learner_busy_s"],
            "sandbox": sum(stage_s.get(s, 0.0) for s in SANDBOX_STAGES)}


def summary(rows: list[dict]) -> dict[str, float]:
    measured = rows[1:] or rows
    wall = sum(r["wall_s"] for r in measured)
    per_stage = [stages(r) for r in measured]
    return {
        "rounds": len(measured),
        "round_wall_s": wall / len(measured),
        "engines_busy": sum(s["engines"] for s in per_stage) / wall,
        "learner_busy": sum(s["learner"] for s in per_stage) / wall,
        "sandbox_busy": sum(s["sandbox"] for s in per_stage) / wall,
        "wall_over_slowest": sum(r["wall_s"] / max(s.values())
                                 for r, s in zip(measured, per_stage)) / len(measured),
        "updates": sum(r["update"] in ("accepted", "rejected") for r in measured),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--experiment", default="cpu_gemma")
    parser.add_argument("--root", type=Path, default=None, help="keep the runs here")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be >= 2: round 0 has no update to overlap")
    root = args.root or Path(tempfile.mkdtemp(prefix="bench-overlap-"))
    root.mkdir(parents=True, exist_ok=True)
    results = {}
    for name, extra in (("sequential", ["loop.overlap=false"]), ("overlap", ["loop.overlap=true"])):
        rows = run(root, name, args.experiment, args.rounds, [*args.overrides, *extra])
        for r in rows:
            print(f"{name} round {r['round']}: wall {r['wall_s']:.0f} s, "
                  + ", ".join(f"{k} {v:.0f} s" for k, v in stages(r).items())
                  + f", update {r['update']}", flush=True)
        results[name] = summary(rows)
    print(f"\n{'mode':<11} {'rounds':>6} {'round s':>8} {'engines':>8} {'learner':>8} "
          f"{'sandbox':>8} {'wall/slowest':>12} {'updates':>7}")
    for name, s in results.items():
        print(f"{name:<11} {s['rounds']:>6} {s['round_wall_s']:>8.0f} {s['engines_busy']:>8.2f} "
              f"{s['learner_busy']:>8.2f} {s['sandbox_busy']:>8.2f} "
              f"{s['wall_over_slowest']:>12.2f} {s['updates']:>7}")
    speedup = results["sequential"]["round_wall_s"] / results["overlap"]["round_wall_s"]
    print(f"overlap / sequential round wall time: 1 / {speedup:.2f} (runs kept in {root})")


if __name__ == "__main__":
    main()
