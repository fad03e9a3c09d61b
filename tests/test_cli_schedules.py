"""`model-router schedules trigger|pause|resume NAME`: an unknown NAME is a usage error (exit 2,
click's code for what was typed wrong) naming the known schedules, refused before Temporal is
asked; it exited 1, Temporal's refusal's code. A full schedule id is still taken as a NAME, and
Temporal's "no such schedule" for it stays exit 1."""

from __future__ import annotations

import uuid

from core.schedules import NAMES
from core.settings import Settings
from tests.helpers.cli import run


async def test_an_unknown_schedule_name_is_a_usage_error_naming_the_known_ones(
    settings: Settings,
) -> None:
    prefix = f"mr-test-{uuid.uuid4().hex[:8]}"
    env = {
        "MODEL_ROUTER_TEMPORAL_ADDRESS": settings.temporal_address,
        "MODEL_ROUTER_SCHEDULE_ID_PREFIX": prefix,
    }
    for command in (
        ("pause", "nightly-cleanup"),
        ("resume", "nightly-cleanup"),
        ("trigger", "nightly-cleanup"),
        ("trigger", "nightly-cleanup", "--wait"),
    ):
        result = await run(env, "schedules", *command)
        assert result.exit_code == 2, (command, result.output)
        assert "Usage:" in result.stderr, result.stderr  # click's usage error, with its usage
        # On one line, as every message on a piped stderr is (typer's panel wrapped it at 80).
        said = next(line for line in result.stderr.splitlines() if "Unknown schedule" in line)
        assert "Unknown schedule 'nightly-cleanup'" in said, result.stderr
        assert all(name in said for name in NAMES), result.stderr
        assert "Temporal" not in result.stderr  # refused before it was asked

    # A full schedule id under the prefix is a name: Temporal's answer for it is told as before.
    missing = await run(env, "schedules", "pause", f"{prefix}/no-such-job")
    assert missing.exit_code == 1, missing.output
    assert "No such schedule" in missing.stderr
