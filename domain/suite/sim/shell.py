"""A simulated POSIX shell over an in-memory file tree, for the suite's shell tasks. Nothing
runs on the host: commands are interpreted here, deterministically.

Supported: pwd, cd, ls, cat, head, tail, wc, grep, find, sort, uniq, mkdir, touch, rm, mv,
cp, echo; pipes (`|`), `;`, `&&`, `||`, and the redirections `<`, `>`, `>>`, `>|`, `2>`,
`2>>`, `2>&1`, `>&2`, `&>`, `&>>` (file descriptors 0, 1 and 2; `/dev/null`, `/dev/stdout` and
`/dev/stderr` as targets). Anything else (`<<`, `&`, `|&`, other descriptors) is refused with a
message. grep matches fixed strings (with optional `^` / `$` anchors) so no model-supplied
regular expression ever runs.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Callable
from typing import NamedTuple

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


class _Token(NamedTuple):
    text: str
    # An unquoted run of ; & | < > (with the file descriptor written against it: "2>", "2>&").
    operator: bool = False


_OPERATOR_CHARS = ";&|<>"
_BLANKS = " \t\r\n"
_DIGITS = frozenset("0123456789")
_CONNECTORS = (";", "&&", "||")
_REDIRECTIONS = {"<", ">", ">>", ">|", ">&", "&>", "&>>"}
# Where a file descriptor writes: the pipe (or the terminal's stdout), the terminal's stderr,
# nothing, or a file of the tree.
_Sink = tuple[str, str]
_PIPE: _Sink = ("pipe", "")
_TERMINAL: _Sink = ("terminal", "")
_NULL: _Sink = ("null", "")


def _tokens(command: str) -> list[_Token]:
    """Words and operators, split as shlex (posix, whitespace_split, punctuation ;&|<>) splits
    them, keeping what shlex loses: a quoted `">"` is a word, not an operator; digits written
    against `<` or `>` (`2>`) are that redirection's file descriptor, not an argument, as in a
    POSIX shell; and, as there, `#` starts a comment only where a word could start. Raises
    ValueError on an unterminated quote or a trailing backslash."""
    tokens: list[_Token] = []
    word: list[str] = []
    quoted = False  # the word has quoted or escaped characters: a word even when empty
    i, n = 0, len(command)

    def end_word() -> None:
        nonlocal quoted
        if word or quoted:
            tokens.append(_Token("".join(word)))
        word.clear()
        quoted = False

    while i < n:
        ch = command[i]
        if ch in _BLANKS:
            end_word()
            i += 1
        elif ch == "#" and not word and not quoted:
            newline = command.find("\n", i)
            i = n if newline < 0 else newline + 1
        elif ch in _OPERATOR_CHARS:
            j = i
            while j < n and command[j] in _OPERATOR_CHARS:
                j += 1
            text = command[i:j]
            if word and not quoted and text[0] in "<>" and set(word) <= _DIGITS:
                text = "".join(word) + text
                word.clear()
            else:
                end_word()
            tokens.append(_Token(text, operator=True))
            i = j
        elif ch == "\\":
            if i + 1 >= n:
                raise ValueError("No escaped character")
            word.append(command[i + 1])
            quoted, i = True, i + 2
        elif ch in "'\"":
            quoted, i = True, _quoted(command, i, word)
        else:
            word.append(ch)
            i += 1
    end_word()
    return tokens


def _quoted(command: str, i: int, word: list[str]) -> int:
    """Adds the quoted text opening at `i` to `word`; the index after its closing quote. In
    double quotes a backslash escapes only `"` and itself."""
    quote, i = command[i], i + 1
    while i < len(command):
        ch = command[i]
        if ch == quote:
            return i + 1
        if ch == "\\" and quote == '"' and i + 1 < len(command):
            following = command[i + 1]
            word.append(following if following in '"\\' else ch + following)
            i += 2
            continue
        word.append(ch)
        i += 1
    raise ValueError("No closing quotation")


Redirection = tuple[str, str, str]  # (file descriptor, operator, target)


def _parse(segment: list[_Token]) -> tuple[list[str], list[Redirection]] | str:
    """A pipeline segment's words and redirections, or the message refusing it."""
    argv: list[str] = []
    redirections: list[Redirection] = []
    it = iter(segment)
    for token in it:
        if not token.operator:
            argv.append(token.text)
            continue
        kind = token.text.lstrip("0123456789")
        number = token.text[: len(token.text) - len(kind)]
        if kind not in _REDIRECTIONS:
            return f"bash: {token.text}: not supported by this shell"
        target = next(it, None)
        if target is None:
            return "syntax error near unexpected token `newline'"
        if target.operator:
            return f"syntax error near unexpected token `{target.text}'"
        fd = number or ("0" if kind == "<" else "1")
        if fd not in (("0",) if kind == "<" else ("1", "2")):
            return f"bash: {token.text}: this descriptor is not supported by this shell"
        if kind == ">&" and target.text == "-":
            return f"bash: {token.text}-: closing a descriptor is not supported by this shell"
        if kind == ">&" and not number and not set(target.text) <= _DIGITS:
            kind = "&>"  # `>&file` is `&>file`
        redirections.append((fd, kind, target.text))
    return argv, redirections


class _Streams:
    """The file descriptors of one command: where its stdout and stderr go, what it reads."""

    def __init__(self, fs: FileSystem, stdin: str | None) -> None:
        self.fs = fs
        self.stdin = stdin
        self.fds: dict[str, _Sink] = {"1": _PIPE, "2": _TERMINAL}
        self.piped: list[str] = []
        self.terminal: list[str] = []
        self.failed = False

    def open(self, fd: str, kind: str, target: str) -> None:
        """Applies one redirection, in order, as a shell does before the command runs: an
        output file is created (and emptied by `>`) now. Raises ShellError."""
        if kind == "<":
            self.stdin = "" if target == "/dev/null" else self.fs.read(target)
        elif kind == ">&" and set(target) <= _DIGITS and target:
            if target not in ("1", "2"):
                raise ShellError(f"{target}: Bad file descriptor")
            self.fds[fd] = self.fds[target]
        elif kind == ">&":
            raise ShellError(f"{target}: ambiguous redirect")
        else:
            sink = self._sink(target, append=kind.endswith(">>"))
            for each in ("1", "2") if kind.startswith("&") else (fd,):
                self.fds[each] = sink

    def _sink(self, target: str, append: bool) -> _Sink:
        if target == "/dev/null":
            return _NULL
        if target in ("/dev/stdout", "/dev/stderr"):
            return self.fds["1" if target == "/dev/stdout" else "2"]
        self.fs.write(target, "", append)
        return ("file", target)

    def write(self, fd: str, text: str) -> None:
        sink = self.fds[fd]
        if not text or sink == _NULL:
            return
        if sink == _PIPE:
            self.piped.append(text)
        elif sink == _TERMINAL:
            self.terminal.append(text)
        else:
            try:
                self.fs.write(sink[1], text, append=True)
            except ShellError as error:
                self.terminal.append(f"{error}\n")
                self.failed = True


def _segments(tokens: list[_Token]) -> list[list[_Token]]:
    parts: list[list[_Token]] = [[]]
    for token in tokens:
        if token.operator and token.text == "|":
            parts.append([])
        else:
            parts[-1].append(token)
    return parts


def _pipeline(fs: FileSystem, tokens: list[_Token]) -> tuple[str, str, int]:
    """Runs one pipeline: its stdout, what it showed on the terminal's stderr (each message
    ending in a newline) and the exit status of its last command."""
    stdin: str | None = None
    stdout, status = "", 0
    terminal: list[str] = []
    for segment in _segments(tokens):
        parsed = _parse(segment)
        if isinstance(parsed, str):
            return "", "".join(terminal) + f"{parsed}\n", 2
        argv, redirections = parsed
        if not argv:
            return "", "".join(terminal) + "syntax error near unexpected token `|'\n", 2
        if argv[0] not in _NO_GLOB:
            argv = [argv[0], *(p for arg in argv[1:] for p in _glob(fs, arg))]
        command = _COMMANDS.get(argv[0])
        if command is None:
            return "", "".join(terminal) + f"{argv[0]}: command not found\n", 127
        streams = _Streams(fs, stdin)
        try:
            for redirection in redirections:
                streams.open(*redirection)
        except ShellError as error:
            streams.write("2", f"bash: {error}\n")
            status = 1
        else:
            try:
                out, err, status = command(fs, argv[1:], streams.stdin), "", 0
            except ShellError as error:
                out, err, status = error.stdout, str(error), error.status
            streams.write("1", out)
            streams.write("2", f"{err}\n" if err else "")
            status = 1 if streams.failed else status
        terminal += streams.terminal
        stdout = stdin = "".join(streams.piped)
    return stdout, "".join(terminal), status


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


def run(fs: FileSystem, command: str) -> str:
    """Runs `command` against `fs` (mutating it); returns what a terminal would show, with
    the exit status appended when it is not 0."""
    try:
        tokens = _tokens(command)
    except ValueError:
        return "bash: syntax error: unterminated quoted string\n[exit status 2]"
    if not tokens:
        return ""
    if len(tokens) > _MAX_WORDS:
        return "bash: command line too long\n[exit status 2]"
    output: list[str] = []
    status = 0
    connector = ";"
    chunk: list[_Token] = []
    for token in [*tokens, _Token(";", operator=True)]:
        if not (token.operator and token.text in _CONNECTORS):
            chunk.append(token)
            continue
        skip = (connector == "&&" and status != 0) or (connector == "||" and status == 0)
        if chunk and not skip:
            stdout, stderr, status = _pipeline(fs, chunk)
            output += [stdout, stderr]
        chunk, connector = [], token.text
    text = "".join(output)
    if len(text) > _OUTPUT_LIMIT:
        text = text[:_OUTPUT_LIMIT] + "\n[output truncated]\n"
    return text + (f"[exit status {status}]" if status else "")
