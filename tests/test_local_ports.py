"""The ports the tests and the benchmarks give their processes (core/local_ports.py): never one
the kernel could hand another process meanwhile, never one another xdist worker gives out."""

from __future__ import annotations

import itertools
import socket
from pathlib import Path

from core.local_ports import FLOOR, Picker, bindable, ephemeral_low, free_port, slice_for


def test_a_free_port_is_below_the_range_the_kernel_hands_out_and_free() -> None:
    low = ephemeral_low()
    ports = [free_port() for _ in range(50)]
    assert all(FLOOR <= p < low for p in ports), ports
    assert len(set(ports)) == len(ports)
    assert all(bindable(p) for p in ports)
    # What the tests used before: a port the kernel may give the next process that asks.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        assert s.getsockname()[1] >= low


def test_each_xdist_worker_has_its_own_ports() -> None:
    slices = [slice_for(32_768, f"gw{i}", "4") for i in range(4)]
    assert [len(s) for s in slices] == [5_692] * 4
    assert slices[0].start == FLOOR and slices[-1].stop <= 32_768
    for a, b in itertools.pairwise(slices):
        assert a.stop <= b.start
    # Outside xdist (the benchmarks, `make test`'s own servers): the whole window.
    assert slice_for(32_768, None, None) == range(FLOOR, 32_768)


def test_a_taken_port_is_not_given() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", free_port()))
        listening.listen()
        port = listening.getsockname()[1]
        assert not bindable(port)
        picker = Picker(range(port, port + 3))
        assert picker.take() == port + 1


def test_the_range_is_read_from_the_kernel(tmp_path: Path) -> None:
    path = tmp_path / "ip_local_port_range"
    path.write_text("40000\t60999\n")
    assert ephemeral_low(path) == 40_000
    assert ephemeral_low(tmp_path / "absent") == 32_768
