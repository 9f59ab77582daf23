"""A finished run's items replayed through a fresh learner under two log-prob gates, one run.

Peers, on the same items in the same order with the same learner settings:
  best      the gate as built: an update is rejected when the held-out log-prob falls more than
            the tolerance below the best of the accepted weights so far (the base's included)
  previous  the gate before it: rejected when it falls more than the tolerance below the
            weights just before the update

The run's recorded pairs (pairs/round_NNN.jsonl) go to the learner round by round, as the run fed
them, with the run's staleness bound (items the run refused as stale are refused here too); after
each update the held-out log-prob is measured on the run's validation subset (the gate's own
texts), and a rejected update restores the learner's last accepted checkpoint, as the run's gate
does. Pass@1 is not re-measured (sampling; the run's subset pass@1 was 0 in every round of the
runs this was written for), so only the log-prob gate decides. Prints each update's figure and
verdict per gate, then the held-out log-prob of the base and of each gate's final weights on
`--problems` HumanEval problems. The rollouts themselves are the run's: what a gate would have
changed in later rounds' data is not replayed.

    .venv/bin/python bench/gate_replay.py runs/cpu_gemma_long [--problems 32]
        [--gates best,previous] [--tolerance T]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from omegaconf import OmegaConf

from spade_ray.config import validate_learner, validate_loop, validate_model, validate_validation
from spade_ray.evaluation.humaneval import load_problems
from spade_ray.learner.learner import Learner
from spade_ray.preferences import read_jsonl
from spade_ray.records import LearnerParams, PreferencePair
from spade_ray.rollout.models import resolve_model


def replay(gate: str, model: str, params: LearnerParams, rounds: list[list[PreferencePair]],
           heldout: list[tuple[str, str]], final: list[tuple[str, str]], tolerance: float,
           max_staleness: int | None, scratch: Path) -> None:
    learner = Learner(model, params)
    accepted = learner.save_checkpoint(scratch / gate / "step_0")
    anchor = base = learner.mean_token_logp(heldout)
    print(f"\n[{gate}] base held-out logp {base:.4f} (tolerance {tolerance})")
    version, kept = 0, 0
    for index, items in enumerate(rounds):
        started = time.perf_counter()
        min_version = None if max_staleness is None else index - max_staleness
        stats = learner.update(items, min_version)
        if stats is None:
            print(f"  round {index}'s {len(items)} items: buffered")
            continue
        logp = learner.mean_token_logp(heldout)
        ok = logp >= anchor - tolerance
        if ok:
            kept += 1
            accepted = learner.save_checkpoint(scratch / gate / f"step_{learner.step}")
            anchor = max(anchor, logp) if gate == "best" else logp
        else:
            learner.load_checkpoint(accepted)
        version += 1
        print(f"  round {index}'s {len(items)} items (stale {int(stats.get('stale', 0))}): "
              f"held-out logp {logp:.4f}, {'accepted' if ok else 'rejected'}, anchor "
              f"{anchor:.4f}, {time.perf_counter() - started:.0f} s", flush=True)
    final_logp = learner.mean_token_logp(final)
    print(f"[{gate}] {kept}/{version} updates accepted; held-out logp on the {len(final)} "
          f"problems: final {final_logp:.4f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--problems", type=int, default=32, help="for the final figures")
    parser.add_argument("--gates", default="best,previous")
    parser.add_argument("--tolerance", type=float, help="default: the run's learner setting")
    args = parser.parse_args()

    cfg = OmegaConf.load(args.run_dir / ".hydra" / "config.yaml")
    learner_cfg, params = validate_learner(cfg.learner)
    loop = validate_loop(cfg.loop)
    validation = validate_validation(cfg.validation)
    if params is None:
        raise SystemExit(f"{args.run_dir} ran without a learner: nothing to replay")
    tolerance = args.tolerance if args.tolerance is not None else learner_cfg.gate_logp_tolerance
    if tolerance is None:
        raise SystemExit("the run's log-prob gate was off: give --tolerance")
    model = resolve_model(validate_model(cfg.model).roles["solver"].model)
    files = sorted((args.run_dir / "pairs").glob("round_*.jsonl"))
    if not files:
        raise SystemExit(f"{args.run_dir / 'pairs'} has no round_NNN.jsonl")
    # The last round's items were never trained on by the run (it ended): left out here too.
    rounds = [read_jsonl(f) for f in files[:-1]]
    heldout = [(p.prompt, p.canonical_solution)
               for p in validation.load(loop.seed)]
    final = [(p.prompt, p.canonical_solution) for p in load_problems(args.problems)]
    print(f"{args.run_dir}: {sum(map(len, rounds))} items over {len(rounds)} rounds, model "
          f"{model}, gate texts {len(heldout)}, final texts {len(final)}")
    with tempfile.TemporaryDirectory() as scratch:
        base = Learner(model, params).mean_token_logp(final)
        print(f"base weights: held-out logp on the {len(final)} problems {base:.4f}")
        for gate in args.gates.split(","):
            if gate not in ("best", "previous"):
                raise SystemExit(f"--gates: {gate!r} is not best or previous")
            replay(gate, model, params, rounds, heldout, final, tolerance,
                   loop.max_staleness, Path(scratch))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
