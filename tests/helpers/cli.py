"""Running the operator CLI from async tests, against the API served in the same process."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import httpx
from typer.testing import CliRunner, Result

from cli.main import app
from core.settings import get_settings


async def run(env: Mapping[str, str | None], *args: str) -> Result:
    """The CLI's result; a variable given as None is unset for the command."""

    def invoke() -> Result:
        get_settings.cache_clear()
        try:
            return CliRunner().invoke(app, list(args), env=dict(env))
        finally:
            get_settings.cache_clear()

    # The API serves from this event loop, so the (synchronous) CLI runs beside it.
    return await asyncio.to_thread(invoke)


async def cli_token(http: httpx.AsyncClient, env: Mapping[str, str | None]) -> str:
    """A token for the CLI's own client (MODEL_ROUTER_CLIENT_ID / _SECRET of `env`), from the
    API: what a test does through the API beside the CLI does it as the same client."""
    resp = await http.post(
        "/oauth/token",
        data={"grant_type": "client_credentials"},
        auth=(str(env["MODEL_ROUTER_CLIENT_ID"]), str(env["MODEL_ROUTER_CLIENT_SECRET"])),
    )
    assert resp.status_code == 200, resp.text
    return str(resp.json()["access_token"])
