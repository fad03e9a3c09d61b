"""The in-memory file tree the simulated shell and the file tools work on."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

ROOT = "/project"
# Bounds what a hostile command line can build (cat a a > b; cat b b > a; ...).
MAX_FILE_CHARS = 65_536


class ShellError(Exception):
    """A failure inside a command: its message (stderr) and exit status."""

    def __init__(self, message: str, status: int = 1, stdout: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.stdout = stdout


@dataclass
class FileSystem:
    files: dict[str, str]
    dirs: set[str] = field(default_factory=set)
    cwd: str = ""

    def __post_init__(self) -> None:
        for path in self.files:
            parent = posixpath.dirname(path)
            while parent:
                self.dirs.add(parent)
                parent = posixpath.dirname(parent)

    def is_dir(self, path: str) -> bool:
        return path == "" or path in self.dirs

    def exists(self, path: str) -> bool:
        return path in self.files or self.is_dir(path)

    def children(self, path: str) -> list[str]:
        prefix = f"{path}/" if path else ""
        names = {
            p[len(prefix) :].split("/", 1)[0]
            for p in [*self.files, *self.dirs]
            if p.startswith(prefix) and p != path
        }
        return sorted(names)

    def walk(self, path: str) -> list[str]:
        """Every path under `path` (itself included), sorted."""
        prefix = f"{path}/" if path else ""
        inside = [p for p in [*self.files, *self.dirs] if p.startswith(prefix)]
        return sorted({path, *inside})

    def resolve(self, name: str) -> str:
        if name.startswith("/"):
            if name != ROOT and not name.startswith(ROOT + "/"):
                raise ShellError(f"{name}: No such file or directory")
            name = name[len(ROOT) :].lstrip("/")
        else:
            name = posixpath.join(self.cwd, name)
        parts: list[str] = []
        for part in name.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                if not parts:
                    raise ShellError(f"{name}: No such file or directory")
                parts.pop()
            else:
                parts.append(part)
        return "/".join(parts)

    def read(self, name: str) -> str:
        path = self.resolve(name)
        if self.is_dir(path):
            raise ShellError(f"{name}: Is a directory")
        if path not in self.files:
            raise ShellError(f"{name}: No such file or directory")
        return self.files[path]

    def write(self, name: str, text: str, append: bool = False) -> None:
        path = self.resolve(name)
        if self.is_dir(path):
            raise ShellError(f"{name}: Is a directory")
        if not self.is_dir(posixpath.dirname(path)):
            raise ShellError(f"{name}: No such file or directory")
        content = (self.files.get(path, "") if append else "") + text
        if len(content) > MAX_FILE_CHARS:
            raise ShellError(f"{name}: File too large")
        self.files[path] = content
