"""`spade-ray` command line.

    spade-ray run [HYDRA OVERRIDES...]          the self-play loop (a Hydra app: -m sweeps)
    spade-ray eval [--problems N] [--tiers T] [--model M]   HumanEval pass@1 via the sandbox
    spade-ray trace RUN_DIR [summary|tasks|candidates TASK_ID|sql QUERY]
    spade-ray diagnose RUN_DIR [--recheck N] [--backend local|docker] [--run-id ID] [--json]
    spade-ray report RUN_DIR [--out FILE]      the run as one HTML page (RUN_DIR/report.html)
    spade-ray sandbox exec FILE [--stdin FILE] [--timeout S] [--memory-mb N]
                               [--backend local|docker] [--json]
    spade-ray sandbox check TASK.json SOLUTION.py [--backend local|docker] [--json]

Exit status: 0 when the program ran `ok` (exec), passed every test (check) or every check of
the run passed (diagnose), 1 otherwise, 2 for bad input (the message names it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sqlite3
import sys
from pathlib import Path

from spade_ray.records import CheckResult, ExecResult, ExecStatus, Limits, to_dict


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:  # Hydra parses its own command line
        from spade_ray.app import hydra_main

        sys.argv = [f"{sys.argv[0]} run", *argv[1:]]
        hydra_main()
        return 0
    args = _parser().parse_args(argv)
    try:
        return args.handler(args)
    except (ValueError, OSError, RuntimeError) as e:  # bad input or missing backend: say which
        print(f"spade-ray: error: {e}", file=sys.stderr)
        return 2
    except sqlite3.Error as e:  # a trace this code cannot read is bad input too
        print(f"spade-ray: error: cannot read the trace: {e}", file=sys.stderr)
        return 2


def eval_validation(args: argparse.Namespace):
    """`eval`'s arguments as a ValidationConfig (no --problems: every problem of the tiers)."""
    from spade_ray.config import validate_validation
    from spade_ray.evaluation.humaneval import load_problems

    tiers = [t.strip() for t in args.tiers.split(",") if t.strip()]
    count = len(load_problems(tiers=tiers)) if args.problems is None else args.problems
    return validate_validation({"problems": count, "tiers": tiers,
                                "samples_per_problem": args.samples,
                                "max_tokens": args.max_tokens})


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spade-ray", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    commands.add_parser("run", help="run self-play rounds (Hydra overrides follow)")
    evaluate = commands.add_parser("eval", help="HumanEval pass@1 of a model via the sandbox")
    evaluate.add_argument("--model", default="gemma3-270m", help="tiny, gemma3-270m or a path")
    evaluate.add_argument("--problems", type=int, default=None,
                          help="subset size (default: all of the tiers' problems)")
    evaluate.add_argument("--tiers", default="",
                          help="only these tiers, e.g. easy or easy,medium (default: all)")
    evaluate.add_argument("--samples", type=int, default=1, help="samples per problem (pass@k)")
    evaluate.add_argument("--max-tokens", type=int, default=256)
    evaluate.set_defaults(handler=_eval)
    trace = commands.add_parser("trace", help="query a run's trace (see tracking/query.py)")
    trace.add_argument("run_dir", type=Path)
    trace.add_argument("what", nargs="?", default="summary",
                       choices=["summary", "tasks", "candidates", "sql"])
    trace.add_argument("arg", nargs="?", help="TASK_ID for candidates, QUERY for sql")
    trace.set_defaults(handler=_trace)
    diagnose = commands.add_parser("diagnose", help="check a run stage by stage "
                                   "(see tracking/diagnose.py)")
    diagnose.add_argument("run_dir", type=Path)
    diagnose.add_argument("--recheck", type=int, default=0, metavar="N",
                          help="re-execute N sampled candidates in the sandbox and compare")
    diagnose.add_argument("--backend", default="local", help="sandbox for --recheck")
    diagnose.add_argument("--run-id", help="the run to diagnose when the trace holds several")
    diagnose.add_argument("--json", action="store_true", help="print one JSON object")
    diagnose.set_defaults(handler=_diagnose)
    report = commands.add_parser("report", help="write the run's HTML report "
                                 "(see tracking/report.py)")
    report.add_argument("run_dir", type=Path)
    report.add_argument("--out", type=Path, help="where to write it (RUN_DIR/report.html)")
    report.set_defaults(handler=_report)
    sandbox = commands.add_parser("sandbox", help="run untrusted code in the sandbox")
    sandbox_commands = sandbox.add_subparsers(required=True, metavar="SUBCOMMAND")

    run = sandbox_commands.add_parser("exec", help="run one program")
    run.add_argument("file", type=Path)
    run.add_argument("--stdin", type=Path, help="file fed to the program's stdin")
    _common(run)
    run.set_defaults(handler=_exec)

    check = sandbox_commands.add_parser("check", help="run a solution against a task's tests")
    check.add_argument("task", type=Path, help="task JSON: tests / check / entry_point")
    check.add_argument("solution", type=Path)
    _common(check)
    check.set_defaults(handler=_check)
    return parser


def _common(parser: argparse.ArgumentParser) -> None:
    defaults = Limits()
    parser.add_argument("--backend", default="local", help="local (bwrap) or docker")
    parser.add_argument("--timeout", type=float, default=defaults.timeout_s,
                        help="wall-clock seconds (also the CPU-seconds limit)")
    parser.add_argument("--memory-mb", type=int, default=defaults.memory_mb)
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _limits(args: argparse.Namespace) -> Limits:
    return dataclasses.replace(Limits(), timeout_s=args.timeout, cpu_s=args.timeout,
                               memory_mb=args.memory_mb)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror}") from e


def _exec(args: argparse.Namespace) -> int:
    from spade_ray.execution import Sandbox

    code = _read(args.file)
    stdin = _read(args.stdin) if args.stdin else None
    with Sandbox(backend=args.backend, limits=_limits(args), workers=1) as sandbox:
        result = sandbox.run(code, stdin)
    _print_exec(result, args.json)
    return 0 if result.status is ExecStatus.OK else 1


def _check(args: argparse.Namespace) -> int:
    from spade_ray.execution import Sandbox
    from spade_ray.execution.checking import load_tests

    tests = load_tests(args.task)
    code = _read(args.solution)
    with Sandbox(backend=args.backend, limits=_limits(args), workers=1) as sandbox:
        result = sandbox.check(code, tests)
    _print_check(result, args.json)
    return 0 if result.passed else 1


def _eval(args: argparse.Namespace) -> int:
    from spade_ray.app import evaluate_model
    from spade_ray.evaluation.humaneval import pass_at_1_by_tier

    result, problems = evaluate_model(args.model, eval_validation(args))
    ks = ", ".join(f"pass@{k} {v:.3f}" for k, v in sorted(result.pass_at_k.items()))
    by_tier = ", ".join(f"{tier} {rate:.3f}" for tier, rate in pass_at_1_by_tier(result, problems))
    print(f"HumanEval {result.problems} problems x{result.samples_per_problem}: {ks} "
          f"(pass@1 by tier: {by_tier}; generate {result.generate_s:.0f} s, "
          f"check {result.check_s:.1f} s)")
    return 0


def _trace(args: argparse.Namespace) -> int:
    from spade_ray.tracking import query

    db = args.run_dir / "trace.sqlite"
    if not db.is_file():
        raise ValueError(f"no trace at {db}: give a run directory (runs/NAME)")
    if args.what in ("candidates", "sql") and not args.arg:
        raise ValueError(f"trace {args.what} needs an argument")
    try:  # opens the file: a damaged, truncated or unopenable one fails here, not in a query
        tables, note = query.table_names(db), query.schema_note(db)
    except sqlite3.Error as e:
        raise ValueError(f"cannot read the trace {db}: {e}") from e
    if note:
        print(note, file=sys.stderr)
    try:
        rows, columns = {
            "summary": lambda: query.summary(db),
            "tasks": lambda: query.list_tasks(db),
            "candidates": lambda: query.list_candidates(db, args.arg),
            "sql": lambda: query.run_sql(db, args.arg),
        }[args.what]()
    except sqlite3.Error as e:  # a query that does not run (or writes): say why, and on what
        raise ValueError(f"trace {args.what} on {db}: {e} (read-only; the trace's tables: "
                         f"{', '.join(tables)})") from e
    print(query.format_table(rows, columns))
    return 0


def _diagnose(args: argparse.Namespace) -> int:
    from spade_ray.tracking import diagnose

    trace = diagnose.load_run(args.run_dir, args.run_id)  # bad input fails before a sandbox starts
    if trace.schema_note:
        print(trace.schema_note, file=sys.stderr)
    if args.recheck > 0:
        from spade_ray.execution import Sandbox

        with Sandbox(backend=args.backend, workers=1) as sandbox:
            result = diagnose.diagnose(trace, args.recheck, sandbox)
    else:
        result = diagnose.diagnose(trace, args.recheck)  # a negative count is refused there
    print(diagnose.diagnosis_json(result) if args.json else diagnose.format_diagnosis(result))
    return result.exit_code


def _report(args: argparse.Namespace) -> int:
    from spade_ray.tracking.report import write_report

    print(f"report: {write_report(args.run_dir, args.out)}")
    return 0


def _print_exec(result: ExecResult, as_json: bool) -> None:
    if as_json:
        print(json.dumps(to_dict(result)))
        return
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    print(f"[{result.status.value}] exit={result.exit_code} wall={result.wall_s:.3f}s "
          f"cpu={result.cpu_s:.3f}s peak={result.peak_memory_mb:.1f}MB "
          f"{result.detail}".rstrip(), file=sys.stderr)


def _print_check(result: CheckResult, as_json: bool) -> None:
    if as_json:
        data = to_dict(result)
        data.update(tests_passed=result.tests_passed, fraction_passed=result.fraction_passed)
        print(json.dumps(data))
        return
    for outcome in result.outcomes:
        print(f"{outcome.outcome:7} {outcome.name} {outcome.message}".rstrip())
    verdict = "PASSED" if result.passed else "FAILED"
    print(f"{verdict}: {result.tests_passed}/{result.tests_total} tests passed "
          f"[{result.execution.status.value}] {result.execution.detail}".rstrip())


if __name__ == "__main__":
    sys.exit(main())
