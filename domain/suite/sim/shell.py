"""A simulated POSIX shell over an in-memory file tree, for the suite's shell tasks. Nothing
runs on the host: commands are interpreted here, deterministically.

Supported: pwd, cd, ls, cat, head, tail, wc, grep, find, sort, uniq, mkdir, touch, rm, mv,
cp, echo; pipes (`|`), `;`, `&&`, `||`, and `>`, `>>`, `<` redirections. grep matches fixed
strings (with optional `^` / `$` anchors) so no model-supplied regular expression ever runs.
"""

from __future__ import annotations

import fnmatch
import posixpath
import shlex
from collections.abc import Callable

from domain.suite.sim import read_commands as r
from domain.suite.sim import write_commands as w
from domain.suite.sim.args import as_output, inputs
from domain.suite.sim.fs import ROOT, FileSystem, ShellError

_OUTPUT_LIMIT = 8000
# With MAX_FILE_CHARS, bounds the memory one command line can use.
_MAX_WORDS = 512
# Their arguments are patterns for the command itself (find -name "*.py", grep "a*").
_NO_GLOB = {"find", "grep", "echo"}


_COMMANDS: dict[str, Callable[[FileSystem, list[str], str | None], str]] = {
    "pwd": lambda fs, args, stdin: as_output([posixpath.join(ROOT, fs.cwd).rstrip("/")]),
    "cd": w.cd,
    "ls": r.ls,
    "cat": lambda fs, args, stdin: "".join(t for _, t in inputs(fs, args, stdin, "cat")),
    "head": r.head_tail(tail=False),
    "tail": r.head_tail(tail=True),
    "wc": r.wc,
    "grep": r.grep,
    "find": r.find,
    "sort": r.sort,
    "uniq": r.uniq,
    "mkdir": w.mkdir,
    "touch": w.touch,
    "rm": w.rm,
    "mv": w.copy_or_move(move=True),
    "cp": w.copy_or_move(move=False),
    "echo": lambda fs, args, stdin: as_output([" ".join(a for a in args if a != "-e")]),
}


def _pipeline(fs: FileSystem, tokens: list[str]) -> tuple[str, str, int]:
    stdin: str | None = None
    stdout, stderr, status = "", "", 0
    for segment in _split(tokens, {"|"}):
        argv, target, append, source = [], None, False, None
        it = iter(segment)
        for part in it:
            if part in (">", ">>"):
                target, append = next(it, None), part == ">>"
                if target is None:
                    return "", "syntax error near unexpected token `newline'", 2
            elif part == "<":
                source = next(it, None)
            else:
                argv.append(part)
        if not argv:
            return "", "syntax error near unexpected token `|'", 2
        if argv[0] not in _NO_GLOB:
            argv = [argv[0], *(p for arg in argv[1:] for p in _glob(fs, arg))]
        command = _COMMANDS.get(argv[0])
        if command is None:
            return "", f"{argv[0]}: command not found", 127
        try:
            if source is not None:
                stdin = fs.read(source)
            stdout, stderr, status = command(fs, argv[1:], stdin), "", 0
        except ShellError as error:
            stdout, stderr, status = error.stdout, str(error), error.status
        if target is not None:
            try:
                fs.write(target, stdout, append)
            except ShellError as error:
                return "", str(error), 1
            stdout = ""
        stdin = stdout
    return stdout, stderr, status


def _glob(fs: FileSystem, word: str) -> list[str]:
    """Pathname expansion relative to the working directory; a pattern that matches nothing
    stays as it is, as in bash."""
    if not any(ch in word for ch in "*?[") or word.startswith("/"):
        return [word]
    parts = word.split("/")
    prefix = f"{fs.cwd}/" if fs.cwd else ""
    found = []
    for path in sorted({*fs.files, *fs.dirs}):
        if not path.startswith(prefix):
            continue
        relative = path[len(prefix) :].split("/")
        if len(relative) == len(parts) and all(
            fnmatch.fnmatchcase(r, p) for r, p in zip(relative, parts, strict=True)
        ):
            found.append("/".join(relative))
    return found or [word]


def _split(tokens: list[str], separators: set[str]) -> list[list[str]]:
    parts: list[list[str]] = [[]]
    for token in tokens:
        if token in separators:
            parts.append([])
        else:
            parts[-1].append(token)
    return parts


def run(fs: FileSystem, command: str) -> str:
    """Runs `command` against `fs` (mutating it); returns what a terminal would show, with
    the exit status appended when it is not 0."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        return "bash: syntax error: unterminated quoted string\n[exit status 2]"
    if not tokens:
        return ""
    if len(tokens) > _MAX_WORDS:
        return "bash: command line too long\n[exit status 2]"
    output: list[str] = []
    status = 0
    connector = ";"
    chunk: list[str] = []
    for token in [*tokens, ";"]:
        if token not in (";", "&&", "||"):
            chunk.append(token)
            continue
        skip = (connector == "&&" and status != 0) or (connector == "||" and status == 0)
        if chunk and not skip:
            stdout, stderr, status = _pipeline(fs, chunk)
            output += [stdout, f"{stderr}\n" if stderr else ""]
        chunk, connector = [], token
    text = "".join(output)
    if len(text) > _OUTPUT_LIMIT:
        text = text[:_OUTPUT_LIMIT] + "\n[output truncated]\n"
    return text + (f"[exit status {status}]" if status else "")
