"""Free TCP ports for the local processes that the tests and the benchmarks start, taken from
below the kernel's ephemeral range.

A port from `bind(("127.0.0.1", 0))` is free when it is asked for, but it is an ephemeral
port: until the process it was meant for listens on it, any process that binds port 0 or
connects out may be given the same port. The Temporal dev server binds five or six internal
ports that way as it starts (`ss -ltnp`, 2026-12-04), and the suite starts a dozen such servers
beside API, simulator and metrics processes that were handed ports a moment earlier. A CI run
failed in the way this explains (2026-12-04): `make dev` said it was up, and its API refused the
next connection, as when a child that found its port taken exits and the stack stops with it.

The kernel never hands out a port below its ephemeral range, so these are taken from there.
Each pytest-xdist worker has its own slice of them, so two workers never pick the same one; a
session starts at a random place in its slice, so two sessions on one machine rarely meet; and
each port is checked free before it is given.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

# Below it: the well-known and the commonly registered services' ports.
FLOOR = 10_000
# Linux's default low end, for a machine that does not say its own.
DEFAULT_EPHEMERAL_LOW = 32_768
# A slice smaller than this is not worth the bookkeeping: the kernel's pick is used instead.
MIN_SLICE = 500


def ephemeral_low(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_LOW


def slice_for(low: int, worker: str | None, workers: str | None) -> range:
    """The ports this process may hand out: its xdist worker's share of [FLOOR, low)."""
    count = int(workers) if workers and workers.isdigit() and int(workers) > 0 else 1
    index = int(worker[2:]) if worker and worker[2:].isdigit() else 0
    size = max(0, low - FLOOR) // count
    start = FLOOR + min(index, count - 1) * size
    return range(start, start + size)


def bindable(port: int) -> bool:
    """Nothing holds the port on the loopback, not even a connection closing (no SO_REUSEADDR:
    a stricter check than the listeners' own)."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _kernel_pick() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Picker:
    """Hands out the free ports of `ports` in turn from `first`, wrapping round."""

    def __init__(self, ports: range, first: int = 0) -> None:
        self.ports = ports
        self._at = first

    def take(self) -> int:
        for _ in range(len(self.ports)):
            port = self.ports[self._at % len(self.ports)]
            self._at += 1
            if bindable(port):
                return port
        raise RuntimeError(f"no free port in {self.ports}")


def _own_picker() -> Picker | None:
    ports = slice_for(
        ephemeral_low(),
        os.environ.get("PYTEST_XDIST_WORKER"),
        os.environ.get("PYTEST_XDIST_WORKER_COUNT"),
    )
    if len(ports) < MIN_SLICE:
        return None
    return Picker(ports, random.randrange(len(ports)))  # noqa: S311 (a spread, not a secret)


_picker: Picker | None = None


def free_port() -> int:
    """A loopback port that is free now and that the kernel gives no other process."""
    global _picker
    if _picker is None:
        _picker = _own_picker()
    return _kernel_pick() if _picker is None else _picker.take()
