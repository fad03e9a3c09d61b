"""Simulated commands that change the tree: mkdir, touch, rm, mv, cp, cd."""

from __future__ import annotations

import posixpath
from collections.abc import Callable

from domain.suite.sim.args import split_flags
from domain.suite.sim.fs import FileSystem, ShellError


def mkdir(fs: FileSystem, args: list[str], stdin: str | None) -> str:
    flags, names = split_flags(args)
    for name in names:
        path = fs.resolve(name)
        if fs.exists(path):
            if "p" in flags and fs.is_dir(path):
                continue
            raise ShellError(f"mkdir: cannot create directory '{name}': File exists")
        parent = posixpath.dirname(path)
        if not fs.is_dir(parent) and "p" not in flags:
            raise ShellError(f"mkdir: cannot create directory '{name}': No such file or directory")
        while path:
            fs.dirs.add(path)
            path = posixpath.dirname(path)
    return ""


def touch(fs: FileSystem, args: list[str], stdin: str | None) -> str:
    for name in split_flags(args)[1]:
        if fs.resolve(name) not in fs.files:
            fs.write(name, "")
    return ""


def rm(fs: FileSystem, args: list[str], stdin: str | None) -> str:
    flags, names = split_flags(args)
    for name in names:
        path = fs.resolve(name)
        if path in fs.files:
            del fs.files[path]
        elif fs.is_dir(path) and path:
            if not flags & {"r", "R"}:
                raise ShellError(f"rm: cannot remove '{name}': Is a directory")
            for inner in fs.walk(path):
                fs.files.pop(inner, None)
                fs.dirs.discard(inner)
        elif "f" not in flags:
            raise ShellError(f"rm: cannot remove '{name}': No such file or directory")
    return ""


def copy_or_move(move: bool) -> Callable[[FileSystem, list[str], str | None], str]:
    tool = "mv" if move else "cp"

    def command(fs: FileSystem, args: list[str], stdin: str | None) -> str:
        flags, names = split_flags(args)
        if len(names) < 2:
            raise ShellError(f"{tool}: missing destination file operand")
        *sources, target = names
        target_path = fs.resolve(target)
        if len(sources) > 1 and not fs.is_dir(target_path):
            raise ShellError(f"{tool}: target '{target}' is not a directory")
        for source in sources:
            path = fs.resolve(source)
            if not fs.exists(path) or not path:
                raise ShellError(f"{tool}: cannot stat '{source}': No such file or directory")
            dest = target_path
            if fs.is_dir(target_path):
                dest = posixpath.join(target_path, posixpath.basename(path))
            if fs.is_dir(path):
                if dest == path or dest.startswith(f"{path}/"):
                    raise ShellError(f"{tool}: cannot {tool} '{source}' into itself")
                if not move and not flags & {"r", "R"}:
                    raise ShellError(f"cp: -r not specified; omitting directory '{source}'")
                for inner in fs.walk(path):
                    moved = dest + inner[len(path) :]
                    if inner in fs.files:
                        fs.files[moved] = fs.files[inner]
                    else:
                        fs.dirs.add(moved)
                if move:
                    rm(fs, ["-r", source], None)
            else:
                if not fs.is_dir(posixpath.dirname(dest)):
                    raise ShellError(f"{tool}: cannot create '{target}': No such file or directory")
                fs.files[dest] = fs.files[path]
                if move:
                    del fs.files[path]
        return ""

    return command


def cd(fs: FileSystem, args: list[str], stdin: str | None) -> str:
    path = fs.resolve(args[0]) if args else ""
    if not fs.is_dir(path):
        raise ShellError(f"cd: {args[0]}: No such file or directory")
    fs.cwd = path
    return ""
