"""Argument and output conventions the simulated commands share."""

from __future__ import annotations

from domain.suite.sim.fs import FileSystem, ShellError


def split_flags(args: list[str]) -> tuple[set[str], list[str]]:
    flags: set[str] = set()
    rest: list[str] = []
    for arg in args:
        if arg.startswith("-") and len(arg) > 1 and not arg[1:].isdigit() and not rest:
            flags.update(arg[1:])
        else:
            rest.append(arg)
    return flags, rest


def lines_of(text: str) -> list[str]:
    return text.splitlines()


def as_output(lines: list[str]) -> str:
    return "".join(f"{line}\n" for line in lines)


def count_option(args: list[str], default: int = 10) -> tuple[int, list[str]]:
    count, rest, i = default, [], 0
    while i < len(args):
        arg = args[i]
        if arg == "-n" and i + 1 < len(args) and args[i + 1].lstrip("-").isdigit():
            count, i = abs(int(args[i + 1])), i + 2
            continue
        if arg.startswith("-n") and arg[2:].isdigit():
            count = int(arg[2:])
        elif arg.startswith("-") and arg[1:].isdigit():
            count = int(arg[1:])
        else:
            rest.append(arg)
        i += 1
    return count, rest


def inputs(fs: FileSystem, names: list[str], stdin: str | None, tool: str) -> list[tuple[str, str]]:
    if names:
        return [(n, fs.read(n)) for n in names]
    if stdin is None:
        raise ShellError(f"{tool}: no input")
    return [("", stdin)]
