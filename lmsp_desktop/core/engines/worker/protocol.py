"""Messages between the service and an engine worker: pickled tuples, each behind a 4-byte
length, over a private socket pair (both ends are this program, started by the service).

Service → worker: ("load", path, engine_options, load_kwargs), ("generate", id, fields),
("embed", id, inputs), ("stop", id), ("unload",).
Worker → service: ("progress", value), ("loaded", facts), ("load_failed", code, message),
("prompt", id, total, cached, processed, waiting) (how far its prompt is read, throttled),
("tokens", id, [(token_id, text), ...]), ("done", id, result, facts, last tokens),
("embedded", id, EmbeddingResult), ("failed", id, code, message), ("unloaded",).
"""

from __future__ import annotations

import asyncio
import pickle
import signal
import struct
from typing import Any

HEADER = struct.Struct("!I")


def encode(message: tuple[Any, ...]) -> bytes:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(body)) + body


async def receive(reader: asyncio.StreamReader) -> tuple[Any, ...] | None:
    """The next message, or None when the other end has gone (EOF, even mid-message)."""
    try:
        header = await reader.readexactly(HEADER.size)
        (size,) = HEADER.unpack(header)
        body = await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    message: tuple[Any, ...] = pickle.loads(body)
    return message


def signal_name(returncode: int | None) -> str:
    """How a process ended, in words a user can search for: "SIGKILL", "exit code 3"."""
    if returncode is None:
        return "an unknown cause"
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"
