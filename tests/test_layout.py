"""The rule of direction (DESIGN.md): stage packages import spade_ray.records, their own modules
and other stages' public package API only; the wiring layer alone combines stage internals."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "spade_ray"
STAGES = ("execution", "rollout", "tasks", "evaluation", "preferences", "tracking", "learner")
WIRING = {"loop.py", "stages.py", "recorder.py", "budget.py", "streaming.py", "training.py",
          "cluster.py", "connect.py",
          "cli.py", "app.py", "config.py"}


def spade_imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return [n for n in names if n.startswith("spade_ray")]


@pytest.mark.parametrize("stage", [s for s in STAGES if (ROOT / s).is_dir()])
def test_stage_packages_do_not_reach_into_each_other(stage):
    bad = []
    for path in (ROOT / stage).rglob("*.py"):
        for name in spade_imports(path):
            parts = name.split(".")
            other = parts[1] if len(parts) > 1 else ""
            if other in STAGES and other != stage and len(parts) > 2:
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
            if other + ".py" in WIRING:
                bad.append(f"{path.relative_to(ROOT)} imports the wiring module {name}")
    assert bad == []


def test_wiring_modules_are_the_ones_documented():
    top = {p.name for p in ROOT.glob("*.py")} - {"__init__.py"}
    assert top <= WIRING
