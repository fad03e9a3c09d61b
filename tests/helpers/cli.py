"""Running the operator CLI from async tests, against the API served in the same process."""

from __future__ import annotations

import asyncio

from typer.testing import CliRunner, Result

from cli.main import app
from core.settings import get_settings


async def run(env: dict[str, str], *args: str) -> Result:
    def invoke() -> Result:
        get_settings.cache_clear()
        try:
            return CliRunner().invoke(app, list(args), env=env)
        finally:
            get_settings.cache_clear()

    # The API serves from this event loop, so the (synchronous) CLI runs beside it.
    return await asyncio.to_thread(invoke)
