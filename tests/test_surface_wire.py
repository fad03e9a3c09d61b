"""One wire-format module for every invoke surface (issue 18, point 4): the routers share
`api/wire.py` (and `api/surface.py` for what they take in) instead of importing each other's
helpers, and the shared modules define what they offer rather than re-export a router's. What
each surface writes is asserted by its own tests (test_invoke, test_gateway, test_messages,
test_responses, test_stream_termination); this one holds the structure that keeps it shared."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SURFACES = ("openai", "gateway", "messages", "responses")


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_no_router_imports_another_router() -> None:
    wrong = {
        f"{path.name} imports {name}"
        for path in sorted((ROOT / "api" / "routers").glob("*.py"))
        for name in _imports(path)
        if name.startswith("api.routers")
    }
    assert not wrong, sorted(wrong)


def test_the_shared_modules_define_what_they_offer() -> None:
    for shared in ("surface.py", "wire.py", "invocation_events.py", "openai_stream.py"):
        names = _imports(ROOT / "api" / shared)
        assert not {n for n in names if n.startswith("api.routers")}, shared


def test_every_invoke_surface_answers_through_the_wire_module() -> None:
    for surface in SURFACES:
        names = _imports(ROOT / "api" / "routers" / f"{surface}.py")
        assert "api.wire" in names, surface
        # The events are the wire module's business: no router matches on hub events itself.
        assert "activities.invoke_hub" not in names, surface
