"""Frames on the jail's pipes: a 4-byte big-endian length, then the body (standard library
only). The server (harness.py), the candidate's side (child.py) and the grader speak it; a
reader caps what it takes, so no writer can grow it."""

import os
import struct

import canonical


def send_frame(fd, *bodies):
    """Each body after its 4-byte length, all in one writev while the pipe takes them: one
    wake-up of the reader, and through Docker's attach stream one chunk for the engine to relay
    instead of two per frame. The bodies are not copied (a report buffer must stay the only
    place its bytes are)."""
    parts = []
    for body in bodies:
        parts += [struct.pack(">I", len(body)), body]
    write_all(fd, *parts)


def write_all(fd, *parts):
    views = [memoryview(part) for part in parts]
    while views:
        written = os.writev(fd, views)
        while views and written >= len(views[0]):
            written -= len(views.pop(0))
        if written:
            views[0] = views[0][written:]


class FrameError(Exception):
    """A frame over its reader's cap, or a stream that ended inside a frame."""


def read_frame(fd, cap):
    """One frame's body, or None at the end of the stream; FrameError for a frame over `cap`
    bytes or cut short (the server's control channel: the host broke the wire format)."""
    header = read_exact(fd, 4)
    if header is None:
        return None
    (size,) = struct.unpack(">I", header)
    if size > cap:
        raise FrameError(f"frame of {size} bytes over the {cap}-byte cap")
    body = read_exact(fd, size)
    if body is None:
        raise FrameError("channel closed mid-frame")
    return body


def recv_frame(fd, cap=canonical.MAX_TEXT_BYTES):
    """One frame's body, or None at end of stream, on an oversized header or mid-frame EOF
    (between the run's processes: a peer that broke a frame has ended the conversation)."""
    try:
        return read_frame(fd, cap)
    except FrameError:
        return None


def read_exact(fd, size):
    """`size` bytes from fd into a fresh bytearray (never an immutable copy), or None at EOF."""
    buf = bytearray(size)
    view, got = memoryview(buf), 0
    while got < size:
        n = os.readv(fd, [view[got:]])
        if not n:
            return None
        got += n
    return buf
