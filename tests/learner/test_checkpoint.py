"""Checkpoints appear whole or not at all."""

import pytest

from spade_ray.learner.checkpoint import atomic_directory


def test_a_failed_write_leaves_the_previous_checkpoint_and_no_debris(tmp_path):
    target = tmp_path / "ckpt"
    with atomic_directory(target) as tmp:
        (tmp / "step").write_text("1")
    with pytest.raises(RuntimeError), atomic_directory(target) as tmp:
        (tmp / "step").write_text("2")
        raise RuntimeError("killed mid-write")
    assert (target / "step").read_text() == "1"
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]


def test_a_complete_write_replaces_the_previous_checkpoint(tmp_path):
    target = tmp_path / "ckpt"
    for step in ("1", "2"):
        with atomic_directory(target) as tmp:
            (tmp / "step").write_text(step)
    assert (target / "step").read_text() == "2"
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]
