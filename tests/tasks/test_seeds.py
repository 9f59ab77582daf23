"""The seed pool's cache: keyed by everything an admitted seed depends on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from spade_ray.tasks import seeds

IMPORTED = """
import sys
import spade_ray.tasks.seeds
for name, module in list(sys.modules.items()):
    if name.startswith("spade_ray") and getattr(module, "__file__", None):
        print(module.__file__)
"""


def test_the_cache_key_covers_every_module_the_seeds_import():
    """A module the admission runs but the key leaves out serves a stale pool after a change to
    it (augment.py and imports.py were left out). Measured in a fresh interpreter, so that what
    the tests imported does not count."""
    out = subprocess.run([sys.executable, "-c", IMPORTED], capture_output=True, text=True,
                         check=True).stdout.split()
    imported = {Path(f).resolve() for f in out}
    assert len(imported) > 20  # the jail's codec and the stages' packages, not the script
    assert imported - {f.resolve() for f in seeds.source_files()} == set()


def test_a_change_to_any_source_file_changes_the_cache_key(monkeypatch, tmp_path):
    files = seeds.source_files()
    before = seeds._key(seeds.SEED_FILE, seeds.Limits(), seeds.AdmissionConfig())
    changed = tmp_path / "augment.py"
    changed.write_text(Path(seeds.__file__).with_name("augment.py").read_text() + "\n# x\n")
    monkeypatch.setattr(seeds, "source_files",
                        lambda: [changed if f.name == "augment.py" else f for f in files])
    assert seeds._key(seeds.SEED_FILE, seeds.Limits(), seeds.AdmissionConfig()) != before
