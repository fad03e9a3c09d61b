"""Two judging defects of the suite, fixed: a multi-file patch fenced file by file is one patch,
and the simulated shell applies stderr / stdout redirections as a POSIX shell does."""

from __future__ import annotations

import json

import pytest

from domain.suite import Suite, SuiteAnswer, SuiteRequest, SuiteToolCall, run_case
from domain.suite.cases.patches import USERS, VIEWS
from domain.suite.cases.shell_tasks import SOURCES
from domain.suite.patching import unified_diff
from domain.suite.sim.fs import FileSystem
from domain.suite.sim.shell import run
from domain.suite.verifiers.patches import extract_patch

SUITE = Suite()

# --- patches fenced file by file -------------------------------------------------------------

USERS_DIFF = unified_diff("app/users.py", USERS, USERS.replace("fetch_user", "get_user"))
VIEWS_DIFF = unified_diff("app/views.py", VIEWS, VIEWS.replace("fetch_user", "get_user"))


def _patch_verdict(text: str) -> tuple[bool, str]:
    result = run_case(SUITE.case("patch-success/rename-function"), lambda _: SuiteAnswer(text=text))
    return result.passed, result.reason


def test_a_multi_file_patch_with_one_fence_per_file_passes() -> None:
    one_fence = f"```diff\n{USERS_DIFF}{VIEWS_DIFF}```\n"
    per_file = (
        f"First app/users.py:\n```diff\n{USERS_DIFF}```\n\nThen app/views.py:\n"
        f"```diff\n{VIEWS_DIFF}```\nThat renames it everywhere."
    )
    assert _patch_verdict(one_fence) == (True, "ok")
    assert _patch_verdict(per_file) == (True, "ok")
    # A fence that holds no diff (how to apply it) is not part of the patch.
    with_command = f"```bash\ngit apply fix.patch\n```\n{per_file}"
    assert _patch_verdict(with_command) == (True, "ok")


def test_fenced_diffs_are_joined_in_order_and_only_diffs() -> None:
    text = f"```diff\n{USERS_DIFF}```\n```\nnot a diff\n```\n```diff\n{VIEWS_DIFF.rstrip()}```"
    assert extract_patch(text) == f"{USERS_DIFF}{VIEWS_DIFF}"
    # An answer cut short inside its last fence keeps what it had.
    assert extract_patch(f"```diff\n{USERS_DIFF}```\n```diff\n{VIEWS_DIFF}") == (
        USERS_DIFF + VIEWS_DIFF
    )
    # As before: no fence, an unclosed only fence, a fence without a diff.
    assert extract_patch(USERS_DIFF) == USERS_DIFF
    assert extract_patch(f"```diff\n{USERS_DIFF}") == f"```diff\n{USERS_DIFF}"
    assert extract_patch("```\nI renamed it.\n```\n") == "I renamed it.\n"


def test_a_per_file_fenced_patch_missing_a_file_still_fails() -> None:
    text = f"```diff\n{USERS_DIFF}```\n```python\nget_user(1)\n```\n"
    assert _patch_verdict(text) == (False, "check 'fetch_user-gone' failed")


# --- redirections in the simulated shell -----------------------------------------------------

FIND = 'grep -rl "TODO(security)" src'


def _answers_from_the_shell(command: str) -> tuple[bool, str, str]:
    """find-marker through the simulator: run `command`, answer with the first line it
    printed. The verdict and what the tool showed."""
    shown: list[str] = []

    def model(request: SuiteRequest) -> SuiteAnswer:
        if request.assistant_turns == 0:
            arguments = json.dumps({"command": command})
            call = SuiteToolCall(id="c1", name="run_shell", arguments=arguments)
            return SuiteAnswer(tool_calls=(call,), finish_reason="tool_calls")
        shown.append(request.messages[-1].content or "")
        return SuiteAnswer(text=shown[-1].split("\n", 1)[0])

    result = run_case(SUITE.case("shell-tool-usage/find-marker"), model)
    return result.passed, result.reason, shown[0]


@pytest.mark.parametrize(
    "command",
    [
        f"{FIND} 2>/dev/null",
        f"{FIND} 2>&1",
        f"{FIND} 2>&1 | head -n 1",
        f"{FIND} 2> /dev/null | sort",
        f"{FIND} 2>/dev/null || echo none",
    ],
)
def test_find_marker_with_stderr_redirected(command: str) -> None:
    passed, reason, shown = _answers_from_the_shell(command)
    assert (passed, reason) == (True, "ok"), shown
    assert shown.endswith("src/auth/session.py\n")


def test_stderr_redirections_route_as_in_a_posix_shell() -> None:
    def shell(command: str) -> str:
        return run(FileSystem(dict(SOURCES)), command)

    assert shell(f"{FIND} 2>/dev/null") == "src/auth/session.py\n"
    assert shell(f"{FIND} 2>&1") == "src/auth/session.py\n"
    assert shell(f"{FIND} >/dev/null && echo found") == "found\n"
    assert shell(f"{FIND} &>/dev/null && echo found") == "found\n"
    assert shell(f"{FIND} 1>/dev/null") == ""
    # A failing command: silenced, shown, or counted through the pipe; order matters.
    missing = "cat nothing.txt"
    assert shell(missing) == "nothing.txt: No such file or directory\n[exit status 1]"
    assert shell(f"{missing} 2>/dev/null") == "[exit status 1]"
    assert shell(f"{missing} &>/dev/null || echo gone") == "gone\n"
    assert shell(f"{missing} >/dev/null 2>&1") == "[exit status 1]"
    assert shell(f"{missing} 2>&1 >/dev/null").startswith("nothing.txt: No such file")
    assert shell(f"{missing} 2>&1 | wc -l") == "1\n"
    assert shell(f"{missing} | wc -l") == "0\nnothing.txt: No such file or directory\n"
    assert shell("echo note >&2 2>/dev/null") == "note\n"
    assert shell("echo note 2>/dev/null >&2") == ""
    # Into files of the tree.
    fs = FileSystem(dict(SOURCES))
    assert run(fs, f"{missing} 2> err.txt; {FIND} &> out.txt") == ""
    assert fs.files["err.txt"] == "nothing.txt: No such file or directory\n"
    assert fs.files["out.txt"] == "src/auth/session.py\n"
    assert run(fs, f"{missing} 2>> err.txt; wc -l < err.txt") == "2\n"
    assert run(fs, "wc -l < /dev/null") == "0\n"


def test_a_descriptor_number_only_when_written_against_the_redirection() -> None:
    fs = FileSystem({})
    assert run(fs, "echo 2 > two.txt && cat two.txt") == "2\n"
    assert run(fs, "echo '2'>quoted.txt && cat quoted.txt") == "2\n"
    assert run(fs, "echo 2>empty.txt && cat empty.txt") == "\n"
    assert run(fs, 'echo ">" "2>&1" \\& ";" && echo ok') == "> 2>&1 & ;\nok\n"


def test_what_the_simulator_cannot_do_is_still_refused() -> None:
    fs = FileSystem(dict(SOURCES))
    assert run(fs, "echo x > /etc/passwd") == (
        "bash: /etc/passwd: No such file or directory\n[exit status 1]"
    )
    assert run(fs, "echo x 2> /tmp/log").endswith("No such file or directory\n[exit status 1]")
    assert run(fs, f"{FIND} 2>&3") == "bash: 3: Bad file descriptor\n[exit status 1]"
    for command, operator in [
        (f"{FIND} 3>/dev/null", "3>"),
        ("cat <<EOF", "<<"),
        (f"{FIND} &", "&"),
        (f"{FIND} |& sort", "|&"),
        (f"{FIND} >&-", ">&-"),
    ]:
        shown = run(fs, command)
        assert shown.startswith(f"bash: {operator}: ") and shown.endswith("[exit status 2]")
        assert "not supported" in shown
    assert run(fs, "curl example.com 2>/dev/null") == ("curl: command not found\n[exit status 127]")
    assert run(fs, f"{FIND} 2>") == "syntax error near unexpected token `newline'\n[exit status 2]"
