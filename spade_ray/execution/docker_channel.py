"""The Docker backend's transports to the harness: Docker's attach stream (any engine) and a
one-shot unix socket bound into the container (an engine on this machine)."""

from __future__ import annotations

import os
import secrets
import select
import socket
import struct
import tempfile
import time

from spade_ray.execution.channel import ChannelError
from spade_ray.execution.protocol import START_TIMEOUT_S

CONTROL_DIR = "/run/spade-control"  # where a ControlSocket's directory is bound in the container
STDERR_KEEP_BYTES = 16384


class AttachStream:
    """Docker's attach socket without a TTY: stdout/stderr come in frames with 8-byte headers
    (stream type, 3 zero bytes, big-endian length). `read` returns stdout; stderr is kept."""

    def __init__(self, sock) -> None:
        self._io = sock
        self._sock = sock._sock  # the raw socket: select() and deadlines need it
        self._sock.settimeout(START_TIMEOUT_S)  # bounds sendall when the harness stops reading
        self._raw = bytearray()
        self._out = bytearray()
        self.stderr = bytearray()
        self._eof = False

    def read(self, n: int, deadline: float) -> bytes:
        while not self._out and not self._eof:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._sock], [], [], remaining)[0]:
                raise ChannelError("the harness did not answer before the host-side deadline")
            self._demux(self._sock.recv(1 << 20))
        chunk = bytes(self._out[:n])
        del self._out[:n]
        return chunk

    def poll(self, reads: int = 1) -> bool:
        """Take in what has arrived (`reads` reads at most, none waiting); whether stdout data
        (or the end of the stream) is here. With the control channel on a ControlSocket nothing
        reads this stream during runs: _stop polls it for the harness's last words."""
        for _ in range(reads):
            if self._eof or not select.select([self._sock], [], [], 0)[0]:
                break
            self._demux(self._sock.recv(1 << 20))
        return bool(self._out) or self._eof

    def fileno(self) -> int:
        return self._sock.fileno()

    def _demux(self, data: bytes) -> None:
        if not data:
            self._eof = True
            return
        self._raw += data
        while len(self._raw) >= 8:
            stream, size = struct.unpack(">BxxxL", self._raw[:8])
            if len(self._raw) < 8 + size:
                return
            (self._out if stream == 1 else self.stderr).extend(self._raw[8:8 + size])
            del self._raw[:8 + size]
            del self.stderr[:-STDERR_KEEP_BYTES]

    def write(self, data: bytes) -> None:
        self._sock.sendall(data)

    def close(self) -> None:
        self._sock.close()
        self._io.close()


class ControlPeerError(Exception):
    """The process that connected to a ControlSocket is not the container's harness."""


class ControlSocket:
    """A one-shot unix socket for one container's control channel, in a fresh directory of this
    host that the container gets read-only at CONTROL_DIR. Frames then go between us and the
    harness directly: through `attach` dockerd and containerd-shim copy every one (0.37 and 0.24
    ms of their CPU a run, measured; ~1 ms of the p50 overhead). Only for an engine that shares
    this machine's files (a local unix socket); the harness falls back to its stdin/stdout, the
    attach stream, when it cannot connect (an engine that does not see the directory binds an
    empty one of its own).

    The directory is 0711 and the socket's name random: the container's uid may connect, no
    other user of the host can list the name; and the peer must be the container's first
    process (SO_PEERCRED). Socket and directory are removed once the harness is connected."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="spade-ray-control-")
        os.chmod(self.dir, 0o711)
        self.name = secrets.token_hex(16)
        self._path = os.path.join(self.dir, self.name)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self._path)
        os.chmod(self._path, 0o666)  # the container's uid (jailuid.py) connects
        self._listener.listen(1)

    def accept(self, stream: AttachStream, deadline: float) -> socket.socket | None:
        """The harness's connection, or None if it answers on the attach stream instead (it
        could not connect, or it died: the stream says which)."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChannelError("the harness neither connected nor answered in time")
            ready = select.select([self._listener, stream], [], [], remaining)[0]
            if self._listener in ready:
                return self._listener.accept()[0]
            if stream in ready and stream.poll():
                return None

    def close(self) -> None:
        self._listener.close()
        for remove, path in ((os.unlink, self._path), (os.rmdir, self.dir)):
            try:
                remove(path)
            except OSError:
                pass


def peer_pid(conn: socket.socket) -> int:
    """The pid (in our namespace) of the process at the other end of a unix socket."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[0]
