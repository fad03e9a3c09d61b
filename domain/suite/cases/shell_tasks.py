"""shell-tool-usage: reaching a goal through a shell tool whose commands are interpreted by
the suite's simulated shell over an in-memory tree (nothing runs on the host)."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping

from domain.enums import Capability
from domain.suite.cases.base import Case
from domain.suite.cases.drivers import Move, Say, SimTool, ToolTaskCase, World, call
from domain.suite.reasons import Failure, Why, fail
from domain.suite.sim.fs import ROOT, FileSystem
from domain.suite.sim.shell import run
from domain.suite.types import function
from domain.suite.verifiers.text import check_answer, short

SYSTEM = (
    f"You are an operator with a bash shell in the project directory {ROOT}. Use the "
    "run_shell tool to inspect and change files; then answer briefly."
)


def _shell(world: World, args: dict[str, str]) -> str:
    world["commands"] += 1
    fs: FileSystem = world["fs"]
    return run(fs, args["command"])


SHELL_TOOL = SimTool(
    function(
        "run_shell",
        "Run a bash command in the project directory; returns its output.",
        {"command": {"type": "string"}},
    ),
    _shell,
)


def _world(files: Mapping[str, str]) -> Callable[[], World]:
    return lambda: {"fs": FileSystem(dict(files)), "commands": 0}


def _used_shell(
    goal: Callable[[World, str], Failure | None],
) -> Callable[[World, str], Failure | None]:
    def judged(world: World, text: str) -> Failure | None:
        if world["commands"] == 0:
            return fail(Why.GOAL_NOT_REACHED, "used-the-shell")
        return goal(world, text)

    return judged


def _case(
    slug: str,
    prompt: str,
    files: Mapping[str, str],
    goal: Callable[[World, str], Failure | None],
    script: list[Move],
    near: Mapping[int, Move],
    names: tuple[str, ...],
) -> Case:
    return ToolTaskCase(
        f"shell-tool-usage/{slug}",
        Capability.SHELL_TOOL_USAGE,
        system=SYSTEM,
        prompt=prompt,
        tools=[SHELL_TOOL],
        world=_world(files),
        goal=_used_shell(goal),
        script=script,
        near_miss=near,
        max_turns=8,
        names=("used-the-shell", *names),
    )


def _relative(text: str) -> str:
    path = short(text)
    return posixpath.normpath(path.removeprefix(ROOT.casefold() + "/"))


LOG = "".join(
    f"2026-11-02T10:{i:02d}:00Z INFO request handled in {17 + i % 5} ms\n" for i in range(42)
)
SOURCES = {
    "src/auth/session.py": (
        "def renew(token):\n    # TODO(security) check the token's age\n    return token\n"
    ),
    "src/core/cache.py": "CACHE = {}\n# TODO(perf) bound the cache size\n",
    "src/core/models.py": "class User:\n    pass\n",
    "README.md": "Mentions TODO(security) in prose only.\n",
}
INBOX = {"inbox/report-1.txt": "q1\n", "inbox/report-2.txt": "q2\n", "inbox/notes.md": "keep\n"}
SERVICE = (
    "# port: 8080  (old default, unused)\nservice:\n  name: ledger\n  port: 8443\n  workers: 4\n"
)


def _archived(world: World, text: str) -> Failure | None:
    fs: FileSystem = world["fs"]
    for name in ("report-1.txt", "report-2.txt"):
        if fs.files.get(f"archive/{name}") != INBOX[f"inbox/{name}"]:
            return fail(Why.GOAL_NOT_REACHED, "reports-in-archive")
    if sorted(p for p in fs.files if p.startswith("inbox/")) != ["inbox/notes.md"]:
        return fail(Why.GOAL_NOT_REACHED, "only-notes-left-in-inbox")
    return None


def shell_tool_usage_cases() -> list[Case]:
    return [
        _case(
            "count-lines",
            "How many lines does logs/app.log have? Use the shell, then answer with the number "
            "only.",
            {"logs/app.log": LOG},
            lambda world, text: check_answer(text, "line-count", "42"),
            [call("run_shell", command="wc -l logs/app.log"), Say("42")],
            {1: Say("41")},
            ("line-count",),
        ),
        _case(
            "find-marker",
            "Which file under src/ contains the text TODO(security)? Use the shell, then answer "
            "with its path relative to the project root, nothing else.",
            SOURCES,
            lambda world, text: (
                None
                if _relative(text) == "src/auth/session.py"
                else fail(Why.ANSWER_MISSING, "file-path")
            ),
            [
                call("run_shell", command='grep -rl "TODO(security)" src'),
                Say("src/auth/session.py"),
            ],
            {1: Say("src/core/cache.py")},
            ("file-path",),
        ),
        _case(
            "archive-reports",
            "Move every .txt file from inbox/ into a new directory archive/ (create it). Leave "
            "the other files where they are.",
            INBOX,
            _archived,
            [
                call("run_shell", command="ls inbox"),
                call(
                    "run_shell",
                    command="mkdir -p archive && mv inbox/report-1.txt inbox/report-2.txt archive/",
                ),
                Say("Moved report-1.txt and report-2.txt to archive/."),
            ],
            {1: call("run_shell", command="mkdir -p archive && cp inbox/*.txt archive/")},
            ("reports-in-archive", "only-notes-left-in-inbox"),
        ),
        _case(
            "config-port",
            "Which port does the service listen on according to config/service.yaml? Use the "
            "shell, then answer with the number only.",
            {"config/service.yaml": SERVICE},
            lambda world, text: check_answer(text, "port", "8443", distractors=["8080"]),
            [call("run_shell", command="cat config/service.yaml"), Say("8443")],
            {1: Say("8080")},
            ("port",),
        ),
    ]
