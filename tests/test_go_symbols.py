"""The dev server's function table (bench/go_symbols.py) names the stripped `temporal` binary's
addresses: bench/profile_invoke.py --dev-server reads perf's samples of it with these names."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

from bench.go_symbols import GoSymbols

TEMPORAL = Path(sys.executable).parent / "temporal"


@pytest.fixture(scope="module")
def symbols() -> GoSymbols:
    return GoSymbols.from_binary(TEMPORAL)


def test_the_elf_entry_point_is_the_go_runtimes_start(symbols: GoSymbols) -> None:
    # Found independently of the table: the ELF header's entry point. A table read with the
    # wrong text start (the header's own field is zero in this binary) names it otherwise.
    entry = struct.unpack_from("<Q", TEMPORAL.read_bytes(), 0x18)[0]
    assert symbols.name(entry) == "_rt0_amd64_linux"


def test_an_address_inside_a_function_is_named_after_it(symbols: GoSymbols) -> None:
    for name in ("runtime.sysmon", "runtime.mallocgc", "runtime.gcBgMarkWorker"):
        entry = symbols.entry(name)
        assert entry is not None, name
        assert symbols.name(entry) == name
        assert symbols.name(entry + 3) == name


def test_a_file_that_is_not_go_is_refused(tmp_path: Path) -> None:
    not_elf = tmp_path / "x"
    not_elf.write_bytes(b"#!/bin/sh\n")
    with pytest.raises(ValueError, match="not a 64-bit ELF"):
        GoSymbols.from_binary(not_elf)
    with pytest.raises(ValueError, match=r"no \.gopclntab"):
        GoSymbols.from_binary(Path(sys.executable).resolve())
