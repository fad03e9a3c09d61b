"""file-editing: reaching an exact expected file content through an edit tool (exact-text
replacement, as coding agents' edit tools work), over an in-memory tree."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from domain.enums import Capability
from domain.suite.cases.base import Case
from domain.suite.cases.drivers import Calls, Say, SimTool, ToolError, ToolTaskCase, World, call
from domain.suite.reasons import Failure, Why, fail
from domain.suite.types import function

SYSTEM = (
    "You are a coding agent working in a repository. Read and change files only through the "
    "tools. When the task is done, reply with a one-line summary."
)


def _read(world: World, args: dict[str, str]) -> str:
    files: dict[str, str] = world["files"]
    if args["path"] not in files:
        raise ToolError(f"no such file: {args['path']}")
    return files[args["path"]]


def _edit(world: World, args: dict[str, str]) -> str:
    files: dict[str, str] = world["files"]
    path, old, new = args["path"], args["old_text"], args["new_text"]
    if path not in files:
        raise ToolError(f"no such file: {path}")
    count = files[path].count(old) if old else 0
    if count == 0:
        raise ToolError(f"old_text was not found in {path}")
    if count > 1:
        raise ToolError(f"old_text occurs {count} times in {path}; include more context")
    files[path] = files[path].replace(old, new, 1)
    return f"edited {path}"


READ_TOOL = SimTool(
    function("read_file", "Return the full text of a file.", {"path": {"type": "string"}}),
    _read,
)
EDIT_TOOL = SimTool(
    function(
        "edit_file",
        "Replace old_text, which must occur exactly once in the file, with new_text. To delete "
        "text, use an empty new_text.",
        {
            "path": {"type": "string"},
            "old_text": {"type": "string"},
            "new_text": {"type": "string"},
        },
    ),
    _edit,
)


def _world(files: Mapping[str, str]) -> Callable[[], World]:
    return lambda: {"files": dict(files)}


def _expect(expected: Mapping[str, str]) -> Callable[[World, str], Failure | None]:
    def goal(world: World, text: str) -> Failure | None:
        files: dict[str, str] = world["files"]
        for path, content in expected.items():
            if files.get(path) != content:
                return fail(Why.FILE_CONTENT, path)
        return None

    return goal


def _edit_call(path: str, old: str, new: str) -> Calls:
    return call("edit_file", path=path, old_text=old, new_text=new)


def _case(
    slug: str,
    prompt: str,
    files: Mapping[str, str],
    expected: Mapping[str, str],
    script: list[Calls | Say],
    near: Mapping[int, Calls | Say],
) -> Case:
    return ToolTaskCase(
        f"file-editing/{slug}",
        Capability.FILE_EDITING,
        system=SYSTEM,
        prompt=prompt,
        tools=[READ_TOOL, EDIT_TOOL],
        world=_world(files),
        goal=_expect(expected),
        script=script,
        near_miss=near,
        max_turns=6,
        names=list(files),
    )


PYPROJECT = (
    '[project]\nname = "billing"\nversion = "1.2.3"\ndescription = "Billing service"\n\n'
    '[tool.ruff]\ntarget-version = "py311"\n'
)
GUIDE = (
    "# Getting started\n\nAfter signing up you will recieve an email with a link.\n\n"
    "If you do not recieve it within ten minutes, check your spam folder.\n"
)
TOOL = "import sys\n\n\ndef main():\n    print(os.getcwd(), sys.argv)\n"
SETTINGS = 'DEBUG = True\nALLOWED_HOSTS = ["example.com"]\nSECRET_KEY_FILE = "/run/secrets/key"\n'


def file_editing_cases() -> list[Case]:
    done = Say("Done.")
    return [
        _case(
            "bump-version",
            "Bump the patch version of the project in pyproject.toml from 1.2.3 to 1.2.4. "
            "Change nothing else.",
            {"pyproject.toml": PYPROJECT},
            {"pyproject.toml": PYPROJECT.replace('"1.2.3"', '"1.2.4"')},
            [
                call("read_file", path="pyproject.toml"),
                _edit_call("pyproject.toml", 'version = "1.2.3"', 'version = "1.2.4"'),
                done,
            ],
            {1: _edit_call("pyproject.toml", 'version = "1.2.3"', 'version = "1.3.0"')},
        ),
        _case(
            "fix-typos",
            'docs/guide.md misspells "receive" as "recieve". Fix every occurrence.',
            {"docs/guide.md": GUIDE},
            {"docs/guide.md": GUIDE.replace("recieve", "receive")},
            [
                call("read_file", path="docs/guide.md"),
                _edit_call("docs/guide.md", "will recieve", "will receive"),
                _edit_call("docs/guide.md", "not recieve", "not receive"),
                done,
            ],
            {3: done, 2: done},
        ),
        _case(
            "add-import",
            "src/tool.py uses os without importing it. Add the line `import os` directly above "
            "`import sys`.",
            {"src/tool.py": TOOL},
            {"src/tool.py": "import os\n" + TOOL},
            [
                call("read_file", path="src/tool.py"),
                _edit_call("src/tool.py", "import sys\n", "import os\nimport sys\n"),
                done,
            ],
            {1: _edit_call("src/tool.py", "import sys\n", "import sys\nimport os\n")},
        ),
        _case(
            "remove-debug",
            "Delete the line that sets DEBUG in app/settings.py entirely; leave the other lines "
            "exactly as they are.",
            {"app/settings.py": SETTINGS},
            {"app/settings.py": SETTINGS.replace("DEBUG = True\n", "")},
            [
                call("read_file", path="app/settings.py"),
                _edit_call("app/settings.py", "DEBUG = True\n", ""),
                done,
            ],
            {1: _edit_call("app/settings.py", "DEBUG = True", "DEBUG = False")},
        ),
    ]
