"""Joining Ray: a stale address file is ignored, a dead RAY_ADDRESS is a named error in seconds."""

import logging
import os
import socket
import subprocess
import time

import pytest
import ray

from spade_ray import connect as connect_module
from spade_ray.connect import RayUnreachable, connect
from tests.test_cli import SPADE_RAY


@pytest.fixture
def dead_address() -> str:
    """host:port where nothing listens (a port the kernel just handed out, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"127.0.0.1:{port}"


@pytest.fixture
def live_address():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def inits(monkeypatch, tmp_path):
    """ray.init's address for each call, with Ray's address file under tmp_path."""
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda address=None, **kw: calls.append(address))
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS")
    (tmp_path / "ray").mkdir()
    return calls


def write_address_file(address: str) -> None:
    connect_module._address_file().write_text(address)


def test_a_stale_address_file_is_ignored_with_a_warning(inits, dead_address, caplog):
    write_address_file(dead_address)
    with caplog.at_level(logging.WARNING):
        connect()
    assert inits == ["local"]
    assert f"no cluster answers at {dead_address}" in caplog.text


def test_the_latest_cluster_that_answers_is_joined(inits, live_address):
    write_address_file(live_address)
    connect()
    assert inits == [live_address]


def test_without_a_file_or_an_address_ray_starts_a_local_cluster(inits):
    connect()
    assert inits == [None]


@pytest.mark.parametrize("named", ["local", "auto", "ray://head:10001"])
def test_addresses_that_are_not_host_port_go_to_ray_unchecked(inits, monkeypatch, named):
    monkeypatch.setenv("RAY_ADDRESS", named)
    connect()
    assert inits == [named]


def test_a_ray_address_that_answers_is_joined_and_the_file_not_read(inits, monkeypatch,
                                                                    live_address, dead_address):
    write_address_file(dead_address)
    monkeypatch.setenv("RAY_ADDRESS", live_address)
    connect()
    assert inits == [live_address]


def test_a_dead_ray_address_is_a_named_error(inits, monkeypatch, dead_address):
    monkeypatch.setenv("RAY_ADDRESS", dead_address)
    with pytest.raises(RayUnreachable, match=f"RAY_ADDRESS={dead_address}: no Ray cluster "
                                             "answers there"):
        connect()
    assert inits == []


def test_the_cli_names_a_dead_ray_address_in_seconds(dead_address):
    """Before, ray.init retried such an address for minutes (still at it after 300 s)."""
    start = time.monotonic()
    out = subprocess.run([SPADE_RAY, "eval", "--model", "tiny", "--problems", "1"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "RAY_ADDRESS": dead_address})
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert f"RAY_ADDRESS={dead_address}: no Ray cluster answers there" in out.stderr
    assert time.monotonic() - start < 60


def test_a_sandbox_pool_without_ray_is_a_named_error(monkeypatch):
    from spade_ray.execution.pool import SandboxPool

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with pytest.raises(RuntimeError, match="SandboxPool places actors on a Ray cluster: join one"):
        SandboxPool()
