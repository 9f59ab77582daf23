"""`spade-ray run -m hydra/launcher=ray_jobs`: each sweep point as a Ray job on a local head.

Three sweeps run side by side on one head (2 CPUs; a cpu_tiny run reserves 1): two cpu_tiny
points that must both succeed, one point that fails at config validation, and one that the
launcher stops when its timeout passes.
"""

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.test_jobs import LocalHead, local_head, metrics_rounds

pytestmark = pytest.mark.slow  # the head ~20 s, two concurrent cpu_tiny jobs ~75 s

SPADE_RAY = str(Path(sys.executable).parent / "spade-ray")
SWEEP_TIMEOUT_S = 480


SWEEPS = {  # name: (overrides, hydra.launcher.timeout_s)
    "good": (["loop.candidates=2,4"], SWEEP_TIMEOUT_S),
    "bad": (["loop.rounds=0"], SWEEP_TIMEOUT_S),
    "late": (["loop.rounds=1"], 5),
}


def sweep_cmd(head: LocalHead, run_root: Path, overrides: list[str], timeout_s: int) -> list[str]:
    return [SPADE_RAY, "run", "-m", "hydra/launcher=ray_jobs",
            f"hydra.launcher.address={head.env['RAY_API_SERVER_ADDRESS']}",
            f"hydra.launcher.timeout_s={timeout_s}", "experiment=cpu_tiny",
            f"run_root={run_root}", "wandb.mode=offline", *overrides]


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory) -> Iterator[dict[str, tuple[Path, subprocess.CompletedProcess]]]:
    """The sweeps, started together and waited for: {name: (sweep dir, its spade-ray run)}."""
    roots = {name: tmp_path_factory.mktemp(name) for name in SWEEPS}
    with local_head() as head:
        procs = {name: subprocess.Popen(sweep_cmd(head, roots[name], *SWEEPS[name]),
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, env=head.env)
                 for name in roots}
        try:
            outputs = {name: p.communicate(timeout=SWEEP_TIMEOUT_S + 60)[0]
                       for name, p in procs.items()}
        finally:
            for p in procs.values():  # a hung sweep: its jobs die with the head
                p.kill()
        yield {name: (roots[name] / "multirun" / "cpu_tiny",
                      subprocess.CompletedProcess(procs[name].args, procs[name].returncode,
                                                  outputs[name]))
               for name in roots}


@pytest.mark.timeout(SWEEP_TIMEOUT_S + 300)  # and the head's start and stop
def test_every_point_runs_as_a_ray_job_and_succeeds(sweeps):
    sweep_dir, out = sweeps["good"]
    assert out.returncode == 0, out.stdout[-5000:]
    results = json.loads((sweep_dir / "ray_jobs.json").read_text())
    assert [(r["num"], r["status"], r["run_dir"]) for r in results] == \
        [(0, "SUCCEEDED", str(sweep_dir / "0")), (1, "SUCCEEDED", str(sweep_dir / "1"))]
    assert [r["overrides"][-1] for r in results] == ["loop.candidates=2", "loop.candidates=4"]
    assert len({r["job_id"] for r in results}) == 2
    assert all(f"#{r['num']} {r['job_id']}: SUCCEEDED" in out.stdout for r in results)


def test_each_point_writes_its_run_directory_with_its_own_overrides(sweeps):
    sweep_dir, _ = sweeps["good"]
    for num, candidates in ((0, 2), (1, 4)):
        run_dir = sweep_dir / str(num)
        assert metrics_rounds(run_dir) == [0, 1]
        assert (run_dir / "trace.sqlite").is_file()
        cfg = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
        assert cfg.loop.candidates == candidates
        # a run id per point, its W&B run in the sweep's group
        assert (cfg.run_name, cfg.wandb.group) == (f"cpu_tiny-{num}", "cpu_tiny")


def test_a_failed_point_fails_the_sweep_with_its_job_logs(sweeps):
    sweep_dir, out = sweeps["bad"]
    assert out.returncode != 0
    assert "ended FAILED" in out.stdout
    assert "loop.rounds must be >= 1, got 0" in out.stdout  # from the job's own log tail
    [result] = json.loads((sweep_dir / "ray_jobs.json").read_text())
    assert result["status"] == "FAILED"


def test_jobs_still_running_at_the_timeout_are_stopped(sweeps):
    sweep_dir, out = sweeps["late"]
    assert out.returncode != 0
    assert "timeout_s=5 passed: stopping 1 jobs" in out.stdout
    [result] = json.loads((sweep_dir / "ray_jobs.json").read_text())
    assert result["status"] == "STOPPED"
    assert f"{result['job_id']} (#0: " in out.stdout and ") ended STOPPED" in out.stdout
