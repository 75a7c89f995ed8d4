"""Reading a child's events from its pipe against a deadline: the one loop every supervisor uses."""
from __future__ import annotations

import os
import select
from collections.abc import Iterator

from .confine.deadline import Deadline
from .protocol import MAX_LINE_BYTES, decode


class TimedOut(Exception):
    """The deadline passed before the child closed its pipe."""


def read_events(read_fd: int, deadline: Deadline) -> Iterator[dict]:
    """Each event, checked (protocol.decode), until the child closes the pipe. Raises TimedOut when the
    deadline passes first and ProtocolError for a malformed line; the caller may restart the deadline
    between events (a new phase, a turn it waited for)."""
    pending = b""
    while True:
        remaining = deadline.remaining()
        if remaining <= 0:
            raise TimedOut
        ready, _, _ = select.select([read_fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(read_fd, 1 << 16)
        if not chunk:
            return
        pending += chunk
        *lines, pending = pending.split(b"\n")
        if len(pending) > MAX_LINE_BYTES:
            lines.append(pending)  # a line that never ends: decode() refuses it
        for line in lines:
            yield decode(line)
