"""Joining a Ray cluster: the one place that calls ray.init.

The cluster is the one RAY_ADDRESS names (`ray job submit` sets it; `local` asks for a new one),
else the latest `ray start` cluster of this machine, else a new local one: Ray's own order.
Ray finds the latest cluster in its address file (/tmp/ray/ray_current_cluster), which a killed
`ray start`, or a test cluster killed with its process, leaves behind; ray.init then retries the
dead address for minutes (measured: still retrying after 300 s) and `make run` hangs. So an
address is tried first with a TCP connect to its GCS port: a stale file is ignored, with a
warning, and a local cluster starts; a RAY_ADDRESS that does not answer is a named error.
Client addresses (ray://) and "auto" go to Ray unchecked.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from typing import Any

import ray

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 5.0


class RayUnreachable(ConnectionError):
    """RAY_ADDRESS names a cluster that does not answer."""


def connect(**init_kwargs: Any) -> None:
    """ray.init once per process (a no-op when Ray is already initialised); see the module doc."""
    if ray.is_initialized():
        return
    named = os.environ.get("RAY_ADDRESS") or None
    if named is not None:
        if not _answers(named):
            raise RayUnreachable(f"RAY_ADDRESS={named}: no Ray cluster answers there; start it "
                                 f"(`ray start --head`), fix the address, or unset RAY_ADDRESS "
                                 f"(or set it to 'local') to run on a new local cluster")
        ray.init(address=named, **init_kwargs)
        return
    latest = _latest_cluster()
    if latest is not None and not _answers(latest):
        log.warning("ignoring Ray's address file %s: no cluster answers at %s (left by a Ray "
                    "that was killed); starting a local cluster", _address_file(), latest)
        latest = "local"
    ray.init(address=latest, **init_kwargs)


def _address_file() -> Path:
    # Ray's own function for the file's path (it follows RAY_TMPDIR and TMPDIR): private, but
    # Ray is pinned in pyproject.toml, and a copy of its rules would drift from them silently.
    from ray._common.utils import get_ray_address_file

    return Path(get_ray_address_file(None))


def _latest_cluster() -> str | None:
    try:
        return _address_file().read_text().strip() or None
    except FileNotFoundError:
        return None


def _answers(address: str) -> bool:
    """False only for a host:port where nothing accepts a TCP connection."""
    if address in ("local", "auto") or "://" in address:
        return True
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return True  # not host:port: Ray names the problem
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False
