"""Host side of the harness wire format: 4-byte big-endian length + a body (sandbox/harness.py):
UTF-8 JSON, or raw bytes for the tests frame of a check and the grader report after its reply.

The transport differs per backend (pipes for bwrap, Docker's attach socket), so the channel takes
two plain functions: `read(n, deadline) -> bytes` (b"" at end of stream) and `write(data)`.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from collections.abc import Callable
from typing import Any

MAX_FRAME_BYTES = 256 * 1024 * 1024  # far above any output cap: a bigger header is corruption


class ChannelError(RuntimeError):
    """The harness broke the protocol, went silent past the deadline, or went away."""


class Channel:
    def __init__(self, read: Callable[[int, float], bytes], write: Callable[[bytes], None]):
        self._read = read
        self._write = write

    def send(self, message: dict[str, Any], *raw: bytes) -> None:
        """The message, then the raw frames `raw`, in one write (one relay by Docker's engine)."""
        frames = [json.dumps(message, separators=(",", ":")).encode("utf-8"), *raw]
        try:
            self._write(b"".join(struct.pack(">I", len(body)) + body for body in frames))
        except OSError as e:
            raise ChannelError(f"cannot write to the harness: {e}") from e

    def recv_raw(self, deadline: float) -> bytes:
        (size,) = struct.unpack(">I", self._exact(4, deadline))
        if size > MAX_FRAME_BYTES:
            raise ChannelError(f"harness sent a frame header of {size} bytes: stream corrupted")
        return self._exact(size, deadline)

    def recv(self, deadline: float) -> dict[str, Any]:
        try:
            message = json.loads(self.recv_raw(deadline).decode("utf-8"))
        except (ValueError, RecursionError) as e:
            raise ChannelError(f"harness sent a frame that is not JSON: {e}") from e
        if not isinstance(message, dict):
            raise ChannelError(f"harness sent {type(message).__name__}, expected an object")
        return message

    def _exact(self, size: int, deadline: float) -> bytes:
        chunks, got = [], 0
        while got < size:
            chunk = self._read(size - got, deadline)
            if not chunk:
                raise ChannelError("the harness closed its channel (it died or was killed)")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)


def fd_reader(fd: int) -> Callable[[int, float], bytes]:
    """A `read` for a pipe: waits until `deadline` (time.monotonic) at most."""

    def read(n: int, deadline: float) -> bytes:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            raise ChannelError("the harness did not answer before the host-side deadline")
        return os.read(fd, n)

    return read


def fd_writer(fd: int) -> Callable[[bytes], None]:
    def write(data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]

    return write
