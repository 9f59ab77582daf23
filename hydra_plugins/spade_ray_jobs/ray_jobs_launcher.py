"""`hydra/launcher=ray_jobs`: each point of a `spade-ray run -m` sweep runs as a Ray job.

    export RAY_AUTH_MODE=token
    spade-ray run -m hydra/launcher=ray_jobs hydra.launcher.address=http://HEAD:8265 \\
        experiment=cpu_tiny run_root=/shared/runs loop.candidates=2,4

For each point the launcher composes its config here, as the basic launcher does (a bad override
fails before anything is submitted), then submits `spade-ray run <the point's overrides>
hydra.run.dir=<its sweep subdir> run_name=<run_name>-<num>` through the Jobs SDK
(ray.job_submission.JobSubmissionClient), with the checkout as the working_dir less the excludes
of launch/runtime_env.yaml. All points of a batch are submitted at once and run side by side as
far as the cluster's CPUs allow (each run's placement group waits for its resources). The
launcher then waits for every job to end, logs each end, writes <sweep dir>/ray_jobs.json (one
RayJobResult per job: which Ray job ran which point, to fetch its logs later) and returns one
JobReturn per point whose value is that RayJobResult. A job that did not succeed gives a FAILED
JobReturn carrying the tail of its logs, which the sweeper raises (exit status 1). Ctrl-C, or
hydra.launcher.timeout_s running out, stops the sweep's jobs that are still running.

Each point gets a run_name of its own, `<run_name>-<num>`, as app.py names the points of a
basic-launcher sweep: the trace's run id and the W&B run id derive from it (W&B runs sharing an
id would resume one another). When the config has the key named by wandb_group_key and it is
null, every job gets the sweep's W&B group (hydra.launcher.wandb_group: the sweep's run_name, the
group app.py gives a basic-launcher sweep's points); a group set on the command line stays.

Where runs land: the job writes its run directory on the cluster. A relative sweep dir is made
absolute against the directory spade-ray was started from, so on a local head the layout is the
basic launcher's (runs/multirun/NAME/N); on a real cluster, give run_root on storage that the
head and this machine share (this machine writes Hydra's multirun.yaml and ray_jobs.json there).

Why not hydra-ray-launcher: it is pinned to Ray 1.x. Why a job per point and not a Ray task: a
run is a Ray driver of its own (ray.init, placement groups, actors), and a job gives it a status,
logs and a stop. Non-goals: retries, per-job resource requests, results beyond the job's status
(the run directory is the output). Hydra imports every module under hydra_plugins whenever any
Hydra app starts, so this one imports Ray only when it launches; and it runs before the module
is in sys.modules, so no `from __future__ import annotations` (dataclasses would fail).
"""

import copy
import dataclasses
import json
import logging
import os
import re
import shlex
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

log = logging.getLogger(__name__)

SUCCEEDED = "SUCCEEDED"
TERMINAL = frozenset({SUCCEEDED, "FAILED", "STOPPED"})  # ray.job_submission.JobStatus values
_ABSENT = object()
_PLAIN_VALUE = re.compile(r"[\w./@:+-]+")  # an override value Hydra's grammar takes unquoted


@dataclasses.dataclass(frozen=True)
class RayJobResult:
    """What one sweep point's Ray job came to (the launcher's return value per point)."""

    num: int  # hydra.job.num
    job_id: str  # the Ray submission id: `ray job logs JOB_ID`
    status: str  # SUCCEEDED, FAILED or STOPPED
    run_dir: str
    overrides: tuple[str, ...]
    wall_s: float  # from the job's start to its end, as Ray recorded them
    message: str  # the first line of Ray's word on the end ("Job finished successfully." ...)


class RayJobFailed(RuntimeError):
    """A sweep point's job ended other than SUCCEEDED; the message carries its log tail."""


@dataclasses.dataclass(frozen=True)
class _Point:
    num: int
    overrides: tuple[str, ...]
    run_dir: Path
    entrypoint: str
    config: DictConfig


class RayJobsLauncher(Launcher):
    def __init__(self, address: str | None = None, working_dir: str = ".",
                 runtime_env: str | None = "launch/runtime_env.yaml",
                 entrypoint: str = "spade-ray run", wandb_group: str | None = None,
                 wandb_group_key: str = "wandb.group", poll_s: float = 2.0,
                 timeout_s: float | None = None, log_tail_lines: int = 40) -> None:
        if poll_s <= 0 or (timeout_s is not None and timeout_s <= 0):
            raise ValueError(f"hydra.launcher: poll_s={poll_s} and timeout_s={timeout_s} must be "
                             "positive (timeout_s null: wait as long as the jobs run)")
        self.address = address
        self.working_dir = working_dir
        self.runtime_env = runtime_env
        self.entrypoint = entrypoint
        self.wandb_group = wandb_group
        self.wandb_group_key = wandb_group_key
        self.poll_s = poll_s
        self.timeout_s = timeout_s
        self.log_tail_lines = log_tail_lines
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self._warned_no_group = False

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        # task_function is not called here: each job runs the app's entrypoint on the cluster
        self.config = config
        self.hydra_context = hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.config is not None and self.hydra_context is not None, "setup() first"
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        cwd = Path(self.config.hydra.runtime.cwd)
        points = [self._point(initial_job_idx + i, overrides, cwd)
                  for i, overrides in enumerate(job_overrides)]
        runtime_env = self._runtime_env(cwd)
        client = self._client()
        log.info(f"Launching {len(points)} jobs on the Ray cluster at {client.get_address()} "
                 f"(working_dir {runtime_env['working_dir']})")
        jobs: dict[int, str] = {}
        try:
            for point in points:
                jobs[point.num] = client.submit_job(
                    entrypoint=point.entrypoint, runtime_env=runtime_env,
                    metadata={"spade_ray_sweep": self.wandb_group or "",
                              "hydra_job_num": str(point.num)})
                log.info(f"\t#{point.num} {jobs[point.num]}: "
                         f"{' '.join(filter_overrides(point.overrides))} -> {point.run_dir}")
            results = self._wait(client, points, jobs)
        except BaseException:  # Ctrl-C or a failed submission: leave nothing running
            _stop(client, jobs.values())
            raise
        sweep_dir = _absolute(cwd, str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        (sweep_dir / "ray_jobs.json").write_text(
            json.dumps([dataclasses.asdict(r) for r in results], indent=1) + "\n")
        return [self._job_return(client, p, r) for p, r in zip(points, results)]

    def _point(self, num: int, overrides: Sequence[str], cwd: Path) -> _Point:
        """One sweep point: its composed config, run directory and the job's command line."""
        assert self.config is not None and self.hydra_context is not None
        config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(config):
            config.hydra.job.id = num
            config.hydra.job.num = num
        run_dir = _absolute(cwd, str(config.hydra.sweep.dir)) / str(config.hydra.sweep.subdir)
        ours = {"hydra.run.dir": str(run_dir), "run_name": f"{config.run_name}-{num}"}
        group = OmegaConf.select(config, self.wandb_group_key, default=_ABSENT)
        if group is None and self.wandb_group:  # a group the user chose stays
            ours[self.wandb_group_key] = self.wandb_group
        elif group is _ABSENT and self.wandb_group and not self._warned_no_group:
            self._warned_no_group = True
            log.warning(f"the config has no {self.wandb_group_key}: the jobs' W&B runs are not "
                        "grouped (hydra.launcher.wandb_group_key names the key)")
        args = [o for o in overrides if _override_key(o) not in ours]
        args += [f"{key}={_hydra_value(value)}" for key, value in ours.items()]
        entrypoint = " ".join([self.entrypoint, *map(shlex.quote, args)])
        return _Point(num, tuple(overrides), run_dir, entrypoint, config)

    def _runtime_env(self, cwd: Path) -> dict[str, Any]:
        env: dict[str, Any] = {}
        if self.runtime_env:
            path = _absolute(cwd, self.runtime_env)
            if not path.is_file():
                raise FileNotFoundError(
                    f"hydra.launcher.runtime_env={self.runtime_env}: no such file under {cwd}; "
                    "run from the checkout, or give its path (null: no excludes)")
            env = yaml.safe_load(path.read_text()) or {}
        env["working_dir"] = str(_absolute(cwd, self.working_dir))
        return env

    def _client(self) -> Any:
        from ray.job_submission import JobSubmissionClient

        if self.address:
            # Ray's lookup prefers this variable to the argument (ray.dashboard.utils.
            # get_address_for_submission_client): set it, so that the address given here wins.
            os.environ["RAY_API_SERVER_ADDRESS"] = self.address
        elif not (os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get("RAY_ADDRESS")):
            # without one, Ray would pick whichever local cluster it finds
            raise ValueError("hydra/launcher=ray_jobs needs the cluster's job server: "
                             "hydra.launcher.address=http://HEAD:8265 or RAY_API_SERVER_ADDRESS")
        return JobSubmissionClient(self.address)

    def _wait(self, client: Any, points: list[_Point],
              jobs: dict[int, str]) -> list[RayJobResult]:
        """Poll until every job has ended (one list_jobs request per poll); past timeout_s,
        stop the jobs still running and collect them as they stop."""
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        ended: dict[int, RayJobResult] = {}
        while True:
            details = {d.submission_id: d for d in client.list_jobs()}
            for point in points:
                job_id = jobs[point.num]
                info = details.get(job_id)
                status = info.status.value if info is not None else "PENDING"
                if point.num in ended or status not in TERMINAL:
                    continue
                wall_s = ((info.end_time or 0) - (info.start_time or 0)) / 1000
                # Ray's message for a failed entrypoint goes on with its last 20,000 characters
                # of logs: the first line says it, the log tail comes from get_job_logs
                message = (info.message or "").split("\n", 1)[0]
                ended[point.num] = RayJobResult(point.num, job_id, status, str(point.run_dir),
                                                point.overrides, max(wall_s, 0.0), message)
                log.info(f"\t#{point.num} {job_id}: {status} after {wall_s:.0f} s")
            if len(ended) == len(points):
                return [ended[p.num] for p in points]
            if deadline is not None and time.monotonic() > deadline:
                log.warning(f"hydra.launcher.timeout_s={self.timeout_s} passed: stopping "
                            f"{len(points) - len(ended)} jobs")
                _stop(client, [jobs[p.num] for p in points if p.num not in ended])
                deadline = None
            time.sleep(self.poll_s)

    def _job_return(self, client: Any, point: _Point, result: RayJobResult) -> JobReturn:
        task_cfg = copy.deepcopy(point.config)
        with read_write(task_cfg), open_dict(task_cfg):
            del task_cfg["hydra"]
        ret = JobReturn(overrides=list(point.overrides), cfg=task_cfg,
                        hydra_cfg=OmegaConf.create({"hydra": point.config.hydra}),
                        working_dir=result.run_dir, task_name=point.config.hydra.job.name)
        if result.status == SUCCEEDED:
            ret.status = JobStatus.COMPLETED
            ret.return_value = result
        else:
            ret.status = JobStatus.FAILED
            ret.return_value = RayJobFailed(
                f"Ray job {result.job_id} (#{result.num}: {' '.join(result.overrides)}) ended "
                f"{result.status}: {result.message}\n--- the last {self.log_tail_lines} lines "
                f"of its logs (ray job logs {result.job_id}) ---\n"
                f"{_log_tail(client, result.job_id, self.log_tail_lines)}")
        return ret


def _absolute(cwd: Path, path: str) -> Path:
    return Path(path) if Path(path).is_absolute() else cwd / path


def _override_key(override: str) -> str:
    """`+a.b=1`, `++a.b=1`, `~a.b`, `a.b=1` -> `a.b`."""
    return override.split("=", 1)[0].lstrip("+~")


def _hydra_value(value: str) -> str:
    """A string as an override value: quoted unless Hydra's grammar takes it bare (a path with
    a comma would otherwise become a sweep)."""
    if _PLAIN_VALUE.fullmatch(value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _stop(client: Any, job_ids: Iterable[str]) -> None:
    for job_id in job_ids:
        try:
            client.stop_job(job_id)
            log.warning(f"stopped Ray job {job_id}")
        except Exception as e:  # already ended, or the cluster is gone: nothing left to stop
            log.warning(f"could not stop Ray job {job_id}: {e!r}")


def _log_tail(client: Any, job_id: str, lines: int) -> str:
    try:
        return "\n".join(client.get_job_logs(job_id).splitlines()[-lines:])
    except Exception as e:
        return f"(logs unavailable: {e!r})"
