"""What the host sends the harness, and how its reply becomes an ExecResult (shared by backends).

The status is decided from facts measured outside the candidate's control where we have them
(the harness's own kill reason, the cgroup's OOM counter, the wait status), in a fixed order:
limits first, then crashes, then the exit code. Exit code 0 alone means `ok` for a plain run;
a check additionally needs the harness's sentinel (see checking.py).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import secrets
import signal
from pathlib import Path
from typing import Any

from spade_ray.execution.channel import ChannelError
from spade_ray.records import ExecResult, ExecStatus, Limits, TestSuite

SANDBOX_DIR = Path(__file__).resolve().parents[2] / "sandbox"
HARNESS = SANDBOX_DIR / "harness.py"
CANONICAL = SANDBOX_DIR / "canonical.py"
# What runs inside the jail (standard library only): the server, the spawner of its children,
# its run's I/O and limits, its children's set-up, its cleanup, the grader, how its asserts
# record, their data codec, and the frames on their pipes.
JAIL_FILES = tuple(SANDBOX_DIR / f"{name}.py"
                   for name in ("harness", "spawner", "pump", "child", "cleanup", "grader",
                                "recording", "canonical", "framing"))
JAIL_DIR = "/opt/spade-sandbox"  # where every backend puts JAIL_FILES inside the jail
JAIL_HARNESS = f"{JAIL_DIR}/harness.py"
JAIL_SITE = f"{JAIL_DIR}/site"  # whitelisted packages, on the harness's sys.path
# One string-hash seed for every jail of every backend and machine, so that set and dict order
# of strings (which follows the seed) is the same for every candidate of a task and for the
# reference whose outputs grade them: with a random seed per jail, a program that depends on it
# (which admission's two random-seed interpreters can miss, e.g. 1 in 2 for a two-word set)
# would pass on some workers and fail on others, a reward the generator could be paid for.
# The interpreter runs as -I would (-s -P, and an environment we set) except for this one
# variable, which -I's -E would ignore.
JAIL_HASH_SEED = "0"
JAIL_PYTHON = ("-s", "-P", "-S", "-B", JAIL_HARNESS)  # the interpreter's arguments
JAIL_ENV = {"PYTHONHASHSEED": JAIL_HASH_SEED}
REPORT_CAP_BYTES = 4 * 1024 * 1024  # harness.py's cap on a grader report
# How far a cgroup's CPU count for a run may exceed `cpu_s` before the run is over its limit
# after the fact: the harness polls the tree's CPU (so a program that ends between polls can go
# a little over), and Docker's count holds the harness's and grader's share too.
CPU_SLACK_S = 0.1
CANDIDATE_ENDED = "the candidate process ended during the tests"  # grader.py's ENDED
SPAWNER_LOST = "the run stopped or killed the spawner"  # harness.py's SPAWNER_LOST
HOST_GRACE_S = 5.0  # the harness enforces the limits; this only catches a hung harness
START_TIMEOUT_S = 30.0

CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGILL,
                 signal.SIGSYS, signal.SIGTRAP}


class BackendUnavailable(RuntimeError):
    """The backend cannot run here; the message says what is missing and how to get it."""


@dataclasses.dataclass(frozen=True)
class Measured:
    """What the host measured itself (cgroups); None fields fall back to the harness's figures."""

    peak_memory_mb: float | None = None
    cpu_s: float | None = None
    oom_killed: bool = False
    # Usage reached the memory cgroup's limit during the run. Without swap the kernel then
    # reclaims the group's file pages over and over before it OOM-kills, charged to the
    # candidate as CPU time: one that grows its memory slowly can spend its whole CPU budget
    # there (seen: a 1 MB-at-a-time grower hit the 2 s CPU limit in Docker on a loaded host).
    memory_limit_hit: bool = False


def address_space_mb(limits: Limits, memory_cgroup: bool) -> int:
    """RLIMIT_AS for the candidate. Under a memory cgroup it is only a backstop, generous so that
    thread stacks and allocator arenas never fail first but one giant malloc fails fast. Without
    one it is the memory limit itself plus 128 MB of headroom: a forked candidate starts at
    VmSize ~24 MB (measured in the jail, CPython 3.11) and each thread reserves an 8 MB stack."""
    if memory_cgroup:
        return 2 * limits.memory_mb + 1024
    return limits.memory_mb + 128


@functools.lru_cache(maxsize=64)
def limits_fields(limits: Limits) -> dict[str, Any]:
    """`dataclasses.asdict(limits)`, computed once per distinct Limits (frozen, so hashable): it
    deep-copies every field, twice per execution otherwise. Callers must not modify it."""
    return dataclasses.asdict(limits)


def jail_digest() -> str:
    """sha256 of the jail's files, in order (the Docker image tag and the env hash follow it)."""
    digest = hashlib.sha256()
    for path in JAIL_FILES:
        digest.update(path.read_bytes())
    return digest.hexdigest()


@dataclasses.dataclass(frozen=True)
class Request:
    """One execution for the harness: the request frame, and for a check the tests frame (sent
    separately: the harness hands it to the grader without ever parsing it itself)."""

    frame: dict[str, Any]
    tests: bytes | None = None
    nonce: str = ""


def spare_pid(frame: dict[str, Any]) -> int:
    """The jail pid of the candidate the harness forked ahead of the next request."""
    if "harness_error" in frame:
        raise ChannelError(f"harness error: {frame['harness_error']}")
    pid = frame.get("spare")
    if type(pid) is not int:
        raise ChannelError(f"expected the harness's spare frame, got {sorted(frame)}")
    return pid


def build_request(code: str, stdin: bytes | None, limits: Limits, tests: TestSuite | None,
                  *, rlimit_nproc: bool, memory_cgroup: bool,
                  shares_memory_cgroup: bool) -> Request:
    """`rlimit_nproc`: the jail's uid is its own (a user namespace), so RLIMIT_NPROC counts only
    the jail. `memory_cgroup`: a memory cgroup caps the tree. `shares_memory_cgroup`: the server
    is in that cgroup too, so the candidate must be the OOM killer's first choice."""
    request: dict[str, Any] = {
        "address_space_mb": address_space_mb(limits, memory_cgroup),
        "shares_memory_cgroup": shares_memory_cgroup,
        "code": code,
        "stdin": stdin.decode("latin-1") if stdin is not None else None,
        "limits": limits_fields(limits),
        "rlimit_nproc": rlimit_nproc,
        "grade": tests is not None,
    }
    if tests is None:
        return Request(request)
    nonce = secrets.token_hex(16)
    frame = {"asserts": list(tests.asserts), "check": tests.check,
             "entry_point": tests.entry_point, "preamble": tests.preamble,
             "examples": [[e.args, e.expected] for e in tests.examples],
             "tolerance": tests.float_tolerance, "nonce": nonce}
    return Request(request, json.dumps(frame).encode("utf-8"), nonce)


def grader_report(request: Request, reply: dict[str, Any], report: bytes | None
                  ) -> dict[str, Any]:
    """{"outcomes": [...], "suspicion": str}: outcomes only if the grader's report is well formed
    and carries this request's nonce (the grader is trusted, but a report cut short by a kill
    must read as no report); suspicion joins what the grader noticed with how it ended, and
    with what the run did to the jail's own processes (stopped or killed the spawner)."""
    if request.tests is None:
        return {}
    data = _parse_report(report, request.nonce)
    suspicion = [s for s in data.pop("suspicion", [])
                 if s != CANDIDATE_ENDED or reply.get("exit_code") == 0]
    grader_exit = reply.get("grader_exit")
    if isinstance(grader_exit, int) and grader_exit < 0:
        suspicion.append(f"the grader was killed by {_signal_name(-grader_exit)} during the run")
    elif not data and reply.get("reason") is None and reply.get("exit_code") == 0:
        suspicion.append("the grader sent no report although the program ended normally")
    if reply.get("jail_changed") == SPAWNER_LOST:
        suspicion.append(SPAWNER_LOST)
    data["suspicion"] = "; ".join(suspicion)[:1000]
    return data


def _parse_report(report: bytes | None, nonce: str) -> dict[str, Any]:
    if not report or len(report) > REPORT_CAP_BYTES:
        return {}
    try:
        data = json.loads(report)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(data, dict) or data.get("nonce") != nonce:
        return {}
    outcomes = data.get("outcomes")
    if not isinstance(outcomes, list) or not all(_is_outcome(o) for o in outcomes):
        return {}
    suspicion = data.get("suspicion")
    return {"outcomes": [{**o, "name": _text(o["name"]), "message": _text(o["message"])}
                         for o in outcomes],
            "suspicion": [_text(s) for s in suspicion if isinstance(s, str)]
            if isinstance(suspicion, list) else []}


def _text(s: str) -> str:
    """`s` as text that encodes: JSON can carry lone surrogates (`"\\ud800"`), e.g. from a
    candidate's exception message, and UTF-8 (the trace, W&B, a terminal) refuses them."""
    return s.encode("utf-8", errors="replace").decode("utf-8")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _is_outcome(item: Any) -> bool:
    return (isinstance(item, dict) and set(item) == {"name", "outcome", "message", "wall_s"}
            and item["outcome"] in ("passed", "failed", "error")
            and isinstance(item["name"], str) and isinstance(item["message"], str)
            and isinstance(item["wall_s"], (int, float)))


def env_hash(facts: dict[str, Any], limits: Limits) -> str:
    """A short digest of everything that makes a result reproducible."""
    blob = json.dumps({"env": facts, "limits": limits_fields(limits)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def to_exec_result(reply: dict[str, Any], limits: Limits, measured: Measured, *,
                   env: str, enforced_by: str) -> ExecResult:
    status, detail = classify(reply, limits, measured)
    peak = measured.peak_memory_mb
    if peak is None:
        peak = reply["max_rss_kb"] / 1024
    return ExecResult(
        status=status,
        exit_code=reply["exit_code"],
        stdout=_decode(reply["stdout"]),
        stderr=_decode(reply["stderr"]),
        truncated=reply["truncated"],
        wall_s=reply["wall_s"],
        cpu_s=measured.cpu_s if measured.cpu_s is not None else reply["cpu_s"],
        peak_memory_mb=round(peak, 3),
        env_hash=env,
        limits_enforced_by=enforced_by,
        detail=detail,
    )


def sandbox_error(detail: str, limits: Limits, *, env: str, enforced_by: str,
                  wall_s: float = 0.0) -> ExecResult:
    return lost_run(ExecStatus.SANDBOX_ERROR, detail, limits, env=env, enforced_by=enforced_by,
                    wall_s=wall_s)


def lost_run(status: ExecStatus, detail: str, limits: Limits, *, env: str, enforced_by: str,
             wall_s: float = 0.0) -> ExecResult:
    """A run whose jail died with it: no output, no exit status of the program's own."""
    return ExecResult(status=status, exit_code=None, stdout="", stderr="",
                      truncated=False, wall_s=wall_s, cpu_s=0.0, peak_memory_mb=0.0,
                      env_hash=env, limits_enforced_by=enforced_by, detail=detail)


def classify(reply: dict[str, Any], limits: Limits, measured: Measured) -> tuple[ExecStatus, str]:
    reason, code = reply["reason"], reply["exit_code"]
    over = _memory_over_limit(reply, limits, measured)
    if over:  # the local backend's group would have OOM-killed it there, whatever came after
        return ExecStatus.MEMORY_LIMIT, over
    if reason == "timeout":
        return ExecStatus.TIMEOUT, f"wall-clock limit of {limits.timeout_s} s reached"
    if reason != "cpu" and measured.cpu_s is not None \
            and measured.cpu_s > limits.cpu_s + CPU_SLACK_S:
        return ExecStatus.TIMEOUT, (f"CPU limit of {limits.cpu_s} s exceeded ({measured.cpu_s:.2f}"
                                    " s counted by the cgroup, in processes the harness could "
                                    "not see)")
    if reason == "cpu" or code == -signal.SIGXCPU:
        if measured.memory_limit_hit:  # the kernel's reclaim at the limit is the CPU it burnt
            return ExecStatus.MEMORY_LIMIT, (f"the {limits.memory_mb} MB memory limit was "
                                             f"reached, then the CPU limit of {limits.cpu_s} s "
                                             f"while the kernel reclaimed at it")
        return ExecStatus.TIMEOUT, f"CPU limit of {limits.cpu_s} s reached"
    if measured.oom_killed:
        return ExecStatus.MEMORY_LIMIT, f"OOM-killed at the {limits.memory_mb} MB memory limit"
    if reply["memory_error"]:
        return ExecStatus.MEMORY_LIMIT, "MemoryError: allocation refused by the memory limit"
    if reason == "output":
        return ExecStatus.OUTPUT_LIMIT, f"output over {limits.max_output_bytes} bytes"
    if code == -signal.SIGXFSZ:
        return ExecStatus.OUTPUT_LIMIT, f"a file grew past {limits.max_file_mb} MB"
    if code is None and reply.get("jail_changed") == SPAWNER_LOST:  # only a run can do that
        return ExecStatus.ERROR, f"{SPAWNER_LOST}, which held its exit status"
    if code is None:
        return ExecStatus.SANDBOX_ERROR, "the harness saw no exit status"
    if code == 0:
        return ExecStatus.OK, ""
    if code > 0:
        return ExecStatus.ERROR, f"exit code {code}"
    # by number: a real-time signal (34-64 here) ends a process as any other does, and
    # signal.Signals names only a few of them (a program that sent itself signal 40 raised
    # ValueError here, and its whole batch was lost: red-team s32)
    if -code in CRASH_SIGNALS:
        return ExecStatus.ERROR, f"crashed with {_signal_name(-code)}"
    return ExecStatus.KILLED, f"killed by {_signal_name(-code)}"


def _memory_over_limit(reply: dict[str, Any], limits: Limits, measured: Measured) -> str:
    """Why a run that was not stopped exceeded `limits.memory_mb`, or "". The Docker container's
    limit leaves room for the jail's server (docker_engine.HARNESS_MARGIN_MB) and the run's
    peak there counts its growth with the output it buffers; the local backend's group holds
    the candidate alone, at exactly memory_mb. A program allocating 135 MB under 128 was `ok`
    on Docker, peak 136 MB, and memory_limit locally (red-team s24 H6): so a peak over the
    limit, less what the server buffered (the output, its text and its frame: 3 copies), is
    the program's memory limit on both. Locally the group's own limit already keeps the peak
    under it."""
    if measured.peak_memory_mb is None:
        return ""
    buffered_mb = 3 * (len(reply["stdout"]) + len(reply["stderr"])) / 2**20
    peak = measured.peak_memory_mb - buffered_mb
    if peak <= limits.memory_mb:
        return ""
    return f"peak memory {peak:.0f} MB over the {limits.memory_mb} MB memory limit"


def _decode(latin1_text: str) -> str:
    return latin1_text.encode("latin-1").decode("utf-8", errors="replace")
