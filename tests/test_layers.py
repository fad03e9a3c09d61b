"""No module imports from a layer above it (docs/architecture.md's layout): the import-linter
contracts in pyproject.toml, plus the one rule they cannot say — a workflow imports from
`activities/` only the `*_types` modules that cross the workflow boundary."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_linter_contracts_are_kept() -> None:
    # In a child process: import-linter configures logging with dictConfig, which disables every
    # logger that already exists — in this process, the app's own (model_router.access, …).
    lint = Path(sys.executable).with_name("lint-imports")
    run = subprocess.run(
        [str(lint), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def _imported(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_workflows_import_only_the_activities_types() -> None:
    wrong = {
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / "workflows").rglob("*.py"))
        for name in _imported(path)
        if name.startswith("activities.")
        # `from activities.x_types import Model` also yields "activities.x_types.Model".
        and not name.split(".")[1].endswith("_types")
    }
    assert not wrong, sorted(wrong)


_WRITES = {"update", "insert", "delete"}


def _writes(path: Path) -> set[str]:
    """Statement builders for writes imported from SQLAlchemy, and `session.add/delete/merge`
    calls: the two ways a module writes rows itself instead of through `store/`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
            "sqlalchemy",
            "sqlmodel",
        ):
            found.update(f"imports {a.name}" for a in node.names if a.name in _WRITES)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("add", "add_all", "delete", "merge")
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "session"
        ):
            found.add(f"calls session.{node.func.attr} (line {node.lineno})")
    return found


def test_activities_and_the_api_write_through_the_store() -> None:
    wrong = {
        f"{path.relative_to(ROOT)} {what}"
        for folder in ("activities", "api")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for what in _writes(path)
    }
    assert not wrong, sorted(wrong)
