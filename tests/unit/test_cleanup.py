"""The jail server's cleanup steps (sandbox/cleanup.py) on the host: each reports an error in
words and never raises, so no run can end the server (a sandbox_error) through one."""

import errno
import importlib.util
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2] / "sandbox" / "cleanup.py"
_spec = importlib.util.spec_from_file_location("jail_cleanup", SOURCE)
cleanup = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cleanup)


def test_collecting_unix_garbage_reports_a_failure_instead_of_raising(monkeypatch):
    assert cleanup.collect_unix_garbage() is None

    def refused(*_):
        raise OSError(errno.ETOOMANYREFS, "Too many references: cannot splice")

    monkeypatch.setattr(cleanup.socket, "send_fds", refused)
    assert "Too many references" in cleanup.collect_unix_garbage()
