"""The README's configuration table lists exactly the settings that exist, with their real
defaults, so that adding, renaming or re-defaulting a setting cannot leave the docs behind."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic_core import PydanticUndefined

from core.settings import Settings

README = Path(__file__).resolve().parents[1] / "README.md"


def config_rows() -> dict[str, str]:
    """Env var -> default cell, from the table between the config markers."""
    text = README.read_text()
    section = text.split("<!-- config:start -->", 1)[1].split("<!-- config:end -->", 1)[0]
    rows = {}
    for line in section.splitlines():
        match = re.match(r"\|\s*`(MODEL_ROUTER_[A-Z0-9_]+)`\s*\|([^|]*)\|([^|]*)\|", line)
        if match:
            name, default, description = (g.strip() for g in match.groups())
            assert description, f"{name} has no description"
            assert name not in rows, f"{name} is listed twice"
            rows[name] = default
    return rows


def documented_default(value: object) -> str:
    """How the table writes a default: as the environment would spell it."""
    if value is None or value is PydanticUndefined:
        return "—"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, list | dict):
        return f"`{json.dumps(value, default=str)}`"  # the environment spells these as JSON
    return f"`{value}`"


def test_every_setting_is_in_the_readme_with_its_default() -> None:
    rows = config_rows()
    expected = {
        f"{Settings.model_config.get('env_prefix', '')}{name}".upper(): documented_default(
            field.default
        )
        for name, field in Settings.model_fields.items()
    }

    missing = sorted(set(expected) - set(rows))
    stale = sorted(set(rows) - set(expected))
    assert not missing, f"settings missing from the README config table: {missing}"
    assert not stale, f"README lists settings that do not exist: {stale}"
    wrong = {name: (rows[name], want) for name, want in expected.items() if rows[name] != want}
    assert not wrong, f"README defaults (table, actual): {wrong}"
