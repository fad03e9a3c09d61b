"""A small, strict unified-diff applier over an in-memory tree {path: text}; nothing touches
a disk or runs a process.

Like `git apply --recount`: the line counts in hunk headers are recomputed from the hunk body
(models often miscount them), a hunk may land at an offset from its stated line, but every
context and removed line must match exactly (no fuzz). `a/` and `b/` prefixes are dropped;
`/dev/null` creates or deletes a file. Text around the diff (a preamble, an explanation after
it, `diff --git` and `index` lines) is ignored.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")

PatchErrorKind = Literal["empty", "malformed", "unknown-file", "exists", "context"]


class PatchError(Exception):
    """Why a patch does not apply. `path` is the path as the patch named it."""

    def __init__(self, kind: PatchErrorKind, path: str | None = None) -> None:
        super().__init__(kind)
        self.kind: PatchErrorKind = kind
        self.path = path


@dataclass(frozen=True)
class Hunk:
    old_start: int
    lines: tuple[tuple[str, str], ...]  # (" " | "-" | "+", text without newline)
    old_no_newline: bool = False
    new_no_newline: bool = False

    @property
    def old(self) -> list[str]:
        return [t for op, t in self.lines if op != "+"]

    @property
    def new(self) -> list[str]:
        return [t for op, t in self.lines if op != "-"]


@dataclass(frozen=True)
class FilePatch:
    old_path: str | None
    new_path: str | None
    hunks: tuple[Hunk, ...]


def _header_path(raw: str) -> str | None:
    path = raw.split("\t", 1)[0].strip()
    if path == "/dev/null":
        return None
    if path.startswith(("a/", "b/")):
        path = path[2:]
    return path


def _starts_file(lines: list[str], i: int) -> bool:
    return lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")


def _hunk(lines: list[str], i: int) -> tuple[Hunk, int]:
    match = _HUNK.match(lines[i])
    if match is None:
        raise PatchError("malformed")
    i += 1
    body: list[tuple[str, str]] = []
    blank_run = 0  # trailing bare blank lines: context only if more hunk lines follow
    old_eol = new_eol = False
    while i < len(lines):
        line = lines[i]
        if line.startswith(("@@", "diff ")) or _starts_file(lines, i):
            break
        if line.startswith("\\"):
            if body:
                op = body[-1][0]
                old_eol = old_eol or op in " -"
                new_eol = new_eol or op in " +"
        elif line == "":
            body.append((" ", ""))
            blank_run += 1
            i += 1
            continue
        elif line[0] in " +-":
            body.append((line[0], line[1:]))
        else:
            break
        blank_run = 0
        i += 1
    if blank_run:
        del body[-blank_run:]
    if not any(op != " " for op, _ in body):
        raise PatchError("malformed")
    hunk = Hunk(int(match.group(1)), tuple(body), old_eol, new_eol)
    return hunk, i


def parse_patch(text: str) -> list[FilePatch]:
    lines = text.replace("\r\n", "\n").split("\n")
    patches: list[FilePatch] = []
    i = 0
    while i < len(lines):
        if not _starts_file(lines, i):
            i += 1
            continue
        old, new = _header_path(lines[i][4:]), _header_path(lines[i + 1][4:])
        if old is None and new is None:
            raise PatchError("malformed")
        i += 2
        hunks: list[Hunk] = []
        while i < len(lines) and lines[i].startswith("@@"):
            hunk, i = _hunk(lines, i)
            hunks.append(hunk)
        if not hunks:
            raise PatchError("malformed", new or old)
        patches.append(FilePatch(old, new, tuple(hunks)))
    if not patches:
        raise PatchError("empty")
    return patches


def _split(text: str) -> tuple[list[str], bool]:
    if text == "":
        return [], True
    lines = text.split("\n")
    if lines[-1] == "":
        return lines[:-1], True
    return lines, False


def _join(lines: list[str], newline_at_end: bool) -> str:
    if not lines:
        return ""
    return "\n".join(lines) + ("\n" if newline_at_end else "")


def _find(lines: list[str], block: list[str], guess: int, floor: int) -> int | None:
    """The position nearest `guess`, at or after `floor`, where `block` matches exactly."""
    last = len(lines) - len(block)
    if last < floor:
        return None
    guess = min(max(guess, floor), last)
    for distance in range(0, max(guess - floor, last - guess) + 1):
        for at in (guess - distance, guess + distance) if distance else (guess,):
            if floor <= at <= last and lines[at : at + len(block)] == block:
                return at
    return None


def _apply_hunks(path: str, text: str, hunks: tuple[Hunk, ...]) -> str:
    lines, newline_at_end = _split(text)
    shift = 0
    floor = 0
    for hunk in hunks:
        old, new = hunk.old, hunk.new
        # "-N,0" inserts after line N; otherwise the hunk starts at line N.
        stated = hunk.old_start if not old else hunk.old_start - 1
        at = _find(lines, old, stated + shift, floor)
        if at is None:
            raise PatchError("context", path)
        lines[at : at + len(old)] = new
        shift = at - stated + len(new) - len(old)
        floor = at + len(new)
        if hunk.new_no_newline:
            newline_at_end = False
        elif hunk.old_no_newline:
            newline_at_end = True
    return _join(lines, newline_at_end)


def apply_patch(tree: Mapping[str, str], text: str) -> dict[str, str]:
    """The tree after the patch; raises PatchError when it does not apply as a whole."""
    result = dict(tree)
    for patch in parse_patch(text):
        if patch.old_path is None:
            path = patch.new_path or ""
            if path in result:
                raise PatchError("exists", path)
            result[path] = _apply_hunks(path, "", patch.hunks)
            continue
        if patch.old_path not in result:
            raise PatchError("unknown-file", patch.old_path)
        content = _apply_hunks(patch.old_path, result[patch.old_path], patch.hunks)
        if patch.new_path is None:
            if content:
                raise PatchError("context", patch.old_path)
            del result[patch.old_path]
            continue
        if patch.new_path != patch.old_path:
            if patch.new_path in result:
                raise PatchError("exists", patch.new_path)
            del result[patch.old_path]
        result[patch.new_path] = content
    return result


def unified_diff(path: str, before: str, after: str) -> str:
    """A diff of one file, as `git diff` would write it: for reference answers and tests."""
    body = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"a/{path}",
        tofile=f"b/{path}",
    )
    return "".join(body)
