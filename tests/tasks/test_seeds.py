"""The seed pool's cache: keyed by everything an admitted seed depends on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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


def _three_blocks() -> str:
    return "### END\n".join(seeds.SEED_FILE.read_text().split("### END\n")[:3]) + "### END\n"


def test_the_shipped_seed_file_loads_every_block():
    text = seeds.SEED_FILE.read_text()
    assert len(seeds.load_seed_proposals()) == text.count("\n### Topic:") + 1 == 45


def test_a_seed_file_with_a_byte_order_mark_keeps_its_first_seed(tmp_path):
    path = tmp_path / "seeds.txt"
    path.write_text("\ufeff" + _three_blocks(), encoding="utf-8")
    assert [p.entry_point for _, p in seeds.load_seed_proposals(path)] == [
        "reverse_words", "distinct_vowels", "is_palindrome"]


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("### END\n", "", 1), r"3 topics but 2 complete blocks; block 0 "
                                              r"\(strings, line 1\) has no '### END' line"),
    (lambda t: t.replace("### END\n", "### END \n", 1), r"block 0 \(strings, line 1\)"),
    (lambda t: t[:-len("### END\n")], r"block 2 \(strings, line 26\) has no '### END'"),
    (lambda t: t.replace("### Topic: strings", "### Topic: ", 1), "seed block 0 has no topic"),
    (lambda t: t.replace("### END\n### Topic:", "### END\n## Topic:", 1),
     "text outside every '### Topic: ... ### END' block: '## Topic: strings'"),
])
def test_a_malformed_seed_file_is_refused_naming_the_block(tmp_path, edit, message):
    """Each of these was read without a word, with a seed fewer (or the wrong block named)."""
    path = tmp_path / "seeds.txt"
    path.write_text(edit(_three_blocks()), encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        seeds.load_seed_proposals(path)


def test_a_seed_file_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / "seeds.txt"
    path.write_bytes(b"\xff" + _three_blocks().encode())
    with pytest.raises(ValueError, match="seeds.txt is not UTF-8 text"):
        seeds.load_seed_proposals(path)
