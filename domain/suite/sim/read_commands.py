"""Simulated commands that read the tree: ls, cat, head, tail, wc, grep, find, sort, uniq."""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Callable

from domain.suite.sim.args import as_output, count_option, inputs, lines_of, split_flags
from domain.suite.sim.fs import FileSystem, ShellError


def ls(fs: FileSystem, args: list[str], stdin: str | None) -> str:
    _, names = split_flags(args)
    out: list[str] = []
    for index, name in enumerate(names or ["."]):
        path = fs.resolve(name)
        if path in fs.files:
            out.append(name)
        elif fs.is_dir(path):
            if len(names) > 1:
                out += ([""] if index else []) + [f"{name}:"]
            out += fs.children(path)
        else:
            raise ShellError(f"ls: cannot access '{name}': No such file or directory", 2)
    return as_output(out)


def head_tail(tail: bool) -> Callable[[FileSystem, list[str], str | None], str]:
    def command(fs: FileSystem, args: list[str], stdin: str | None) -> str:
        count, names = count_option(args)
        tool = "tail" if tail else "head"
        pieces = [lines_of(t) for _, t in inputs(fs, names, stdin, tool)]
        return "".join(as_output(p[-count:] if tail and count else p[:count]) for p in pieces)

    return command


def wc(fs: FileSystem, args: list[str], stdin: str | None) -> str:
    flags, names = split_flags(args)
    shown = [f for f in "lwc" if f in flags] or ["l", "w", "c"]
    out: list[str] = []
    totals = [0, 0, 0]
    for name, text in inputs(fs, names, stdin, "wc"):
        counts = [text.count("\n"), len(text.split()), len(text.encode())]
        totals = [a + b for a, b in zip(totals, counts, strict=True)]
        figures = [str(counts["lwc".index(f)]) for f in shown]
        out.append(" ".join([*figures, name]).rstrip())
    if len(names) > 1:
        out.append(" ".join([*(str(totals["lwc".index(f)]) for f in shown), "total"]))
    return as_output(out)


def grep_match(line: str, pattern: str, ignore_case: bool) -> bool:
    if ignore_case:
        line, pattern = line.casefold(), pattern.casefold()
    start, end = pattern.startswith("^"), pattern.endswith("$") and len(pattern) > 1
    needle = pattern[1 if start else 0 : -1 if end else None]
    if start and end:
        return line == needle
    if start:
        return line.startswith(needle)
    if end:
        return line.endswith(needle)
    return needle in line


def grep(fs: FileSystem, args: list[str], stdin: str | None) -> str:
    flags, rest = split_flags(args)
    if not rest:
        raise ShellError("grep: no pattern", 2)
    pattern, names = rest[0], rest[1:]
    sources: list[tuple[str, str]] = []
    for name in names:
        path = fs.resolve(name)
        if fs.is_dir(path):
            if not flags & {"r", "R"}:
                raise ShellError(f"grep: {name}: Is a directory", 2)
            base = name.rstrip("/")
            for inner in fs.walk(path):
                if inner in fs.files:
                    shown = posixpath.join(base, inner[len(path) :].lstrip("/"))
                    sources.append((shown, fs.files[inner]))
        else:
            sources.append((name, fs.read(name)))
    if not names:
        sources = inputs(fs, [], stdin, "grep")
    label = ("H" in flags or len(sources) > 1 or bool(flags & {"r", "R"})) and "h" not in flags
    out: list[str] = []
    matched = False
    for name, text in sources:
        hits = [
            (n, line)
            for n, line in enumerate(lines_of(text), start=1)
            if grep_match(line, pattern, "i" in flags) != ("v" in flags)
        ]
        matched = matched or bool(hits)
        if "l" in flags:
            out += [name] if hits else []
        elif "c" in flags:
            out.append(f"{name}:{len(hits)}" if label else str(len(hits)))
        else:
            for n, line in hits:
                prefix = (f"{name}:" if label else "") + (f"{n}:" if "n" in flags else "")
                out.append(prefix + line)
    if not matched:
        raise ShellError("", 1, stdout=as_output(out))
    return as_output(out)


def find(fs: FileSystem, args: list[str], stdin: str | None) -> str:
    starts: list[str] = []
    i = 0
    while i < len(args) and not args[i].startswith("-"):
        starts.append(args[i])
        i += 1
    name_pattern: tuple[str, bool] | None = None
    kind: str | None = None
    while i < len(args):
        option = args[i]
        value = args[i + 1] if i + 1 < len(args) else None
        if option in ("-name", "-iname") and value is not None:
            name_pattern = (value, option == "-iname")
        elif option == "-type" and value in ("f", "d"):
            kind = value
        else:
            raise ShellError(f"find: unknown predicate '{option}'")
        i += 2
    out: list[str] = []
    for start in starts or ["."]:
        path = fs.resolve(start)
        if not fs.exists(path):
            raise ShellError(f"find: '{start}': No such file or directory")
        for inner in fs.walk(path):
            if (kind == "f" and inner not in fs.files) or (kind == "d" and not fs.is_dir(inner)):
                continue
            base = posixpath.basename(inner) or "."
            if name_pattern is not None:
                pattern, fold = name_pattern
                if not fnmatch.fnmatchcase(
                    base.casefold() if fold else base, pattern.casefold() if fold else pattern
                ):
                    continue
            relative = inner[len(path) :].lstrip("/")
            out.append(posixpath.join(start, relative) if relative else start)
    return as_output(out)


def sort(fs: FileSystem, args: list[str], stdin: str | None) -> str:
    flags, names = split_flags(args)
    lines = [line for _, t in inputs(fs, names, stdin, "sort") for line in lines_of(t)]

    def numeric(line: str) -> tuple[float, str]:
        head = line.strip().split(" ", 1)[0]
        try:
            return float(head), line
        except ValueError:
            return 0.0, line

    ordered = sorted(lines, key=numeric) if "n" in flags else sorted(lines)
    if "u" in flags:
        ordered = list(dict.fromkeys(ordered))
    return as_output(ordered[::-1] if "r" in flags else ordered)


def uniq(fs: FileSystem, args: list[str], stdin: str | None) -> str:
    flags, names = split_flags(args)
    out: list[tuple[int, str]] = []
    for line in (line for _, t in inputs(fs, names, stdin, "uniq") for line in lines_of(t)):
        if out and out[-1][1] == line:
            out[-1] = (out[-1][0] + 1, line)
        else:
            out.append((1, line))
    return as_output([f"{n:>7} {line}" if "c" in flags else line for n, line in out])
