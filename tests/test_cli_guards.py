"""The operator CLI's guards: what it refuses before any request, what it says when it cannot
go on (a database newer than the code, settings that do not validate, an API out of reach), and
that a destructive command waits to be told twice."""

from __future__ import annotations

import asyncio
import http.server
import os
import re
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest
from pydantic import ValidationError

from core.local_ports import free_port
from core.settings import Settings
from store.migrate import code_head, upgrade
from tests.helpers.cli import run


class _Recording(http.server.BaseHTTPRequestHandler):
    """An API that answers the token and records every request it is sent."""

    seen: list[str]

    def do_POST(self) -> None:
        self._record()
        token = jwt.encode({"tid": "t-guards"}, "k" * 32, algorithm="HS256").encode()
        body = b'{"access_token": "' + token + b'", "token_type": "Bearer"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._record()
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _record(self) -> None:
        self.seen.append(f"{self.command} {self.path}")
        self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def recording_api() -> Iterator[tuple[dict[str, str], list[str]]]:
    """The CLI's environment pointed at a recording API, and the requests it has been sent."""
    seen: list[str] = []
    handler = type("Handler", (_Recording,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield (
            {
                "MODEL_ROUTER_API_URL": f"http://127.0.0.1:{server.server_port}",
                "MODEL_ROUTER_CLIENT_ID": "guards",
                "MODEL_ROUTER_CLIENT_SECRET": "guards-secret",
                "COLUMNS": "250",
            },
            seen,
        )
    finally:
        server.shutdown()
        thread.join()


def _said(text: str) -> str:
    """Output with rich's line wrapping undone."""
    return " ".join(text.split())


async def test_upgrade_of_a_database_newer_than_the_code_is_nothing_to_do(tmp_path: Path) -> None:
    """After a rollback of the code the database names a migration this code lacks: upgrade
    raised Alembic's `Can't locate revision` (exit 1), and compose's api and worker, which wait
    on the migrate step, never started."""
    db = tmp_path / "ahead.db"
    url = f"sqlite+aiosqlite:///{db}"
    await asyncio.to_thread(upgrade, url)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999_from_the_future'")

    result = await run({"MODEL_ROUTER_DATABASE_URL": url}, "db", "upgrade")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == (
        f"database at 9999_from_the_future, newer than this code's head {code_head()}; "
        "nothing to do"
    )
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [
            ("9999_from_the_future",)
        ]


async def test_downgrade_without_yes_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "kept.db"
    url = f"sqlite+aiosqlite:///{db}"
    await asyncio.to_thread(upgrade, url)
    env = {"MODEL_ROUTER_DATABASE_URL": url}

    refused = await run(env, "db", "downgrade", "base")
    assert refused.exit_code == 2, refused.output
    assert "--yes" in refused.stderr and "dropping the tables" in _said(refused.stderr)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [
            (code_head(),)
        ]

    done = await run(env, "db", "downgrade", "base", "--yes")
    assert done.exit_code == 0, done.output
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == []


@pytest.mark.parametrize(
    "args",
    [
        ("route", "preview", "../model-deployments/prod/retire?"),
        ("profiles", "show", "../model-deployments/prod?"),
        ("profiles", "show", "agent\n"),
    ],
)
async def test_a_profile_id_that_is_not_one_is_refused_before_any_request(
    recording_api: tuple[dict[str, str], list[str]], args: tuple[str, ...]
) -> None:
    """The id went into the URL's path as it was: this preview was sent as
    POST /factory/model-deployments/prod/retire."""
    env, seen = recording_api
    result = await run(env, *args)
    assert result.exit_code == 2, result.output
    assert seen == []
    assert "PROFILE_ID" in result.stderr and "not a profile id" in result.stderr
    assert "[a-z0-9][a-z0-9._-]{0,99}" in result.stderr  # the rule, not read as markup


async def test_a_run_that_is_not_a_uuid_is_refused_before_any_request(
    recording_api: tuple[dict[str, str], list[str]],
) -> None:
    env, seen = recording_api
    result = await run(env, "receipts", "list", "--run", "../model-deployments/prod?")
    assert result.exit_code == 2, result.output
    assert seen == []
    assert "--run" in result.stderr and "UUID" in result.stderr

    # A well-formed id goes on (and in its plain form).
    run_id = "0f8fad5b-d9cb-469f-a165-70867728950e"
    result = await run(env, "receipts", "list", "--run", "{" + run_id.upper() + "}")
    assert seen[-1] == f"GET /factory/runs/{run_id}/model-receipts"


def test_a_settings_error_names_the_setting_and_never_prints_a_value(tmp_path: Path) -> None:
    """pydantic's traceback listed every value read, the client secret among them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODEL_ROUTER_")}
    env |= {"MODEL_ROUTER_CLIENT_SECRET": "s3cr3t", "MODEL_ROUTER_AUTH_ALGORITHM": "RS256"}
    cli = str(Path(sys.executable).with_name("model-router"))

    def model_router(extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [cli, "deployments", "list"],
            env=env | extra,
            cwd=tmp_path,  # no .env here
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    across = model_router({})
    assert across.returncode == 2, across.stdout + across.stderr
    assert "s3cr3t" not in across.stdout + across.stderr
    assert "Traceback" not in across.stderr
    assert "auth_jwks_url is required when auth_algorithm is RS256" in across.stderr

    one = model_router({"MODEL_ROUTER_API_PORT": "s3cr3t"})
    assert one.returncode == 2, one.stdout + one.stderr
    assert "s3cr3t" not in one.stdout + one.stderr
    assert "MODEL_ROUTER_API_PORT: Input should be a valid integer" in one.stderr

    # The same for whatever else prints the error (the API's and the worker's start).
    with pytest.raises(ValidationError) as raised:
        Settings(client_secret="s3cr3t", auth_algorithm="RS256", _env_file=None)
    assert "s3cr3t" not in str(raised.value)


async def test_an_api_out_of_reach_is_named_with_the_reason() -> None:
    """Only the class was printed (`ConnectError`): a refused port, an unknown host and a TLS
    failure looked alike."""
    env = {
        "MODEL_ROUTER_API_URL": f"http://127.0.0.1:{free_port()}",  # nothing listens there
        "MODEL_ROUTER_CLIENT_ID": "guards",
        "MODEL_ROUTER_CLIENT_SECRET": "guards-secret",
        "COLUMNS": "250",
    }
    result = await run(env, "deployments", "list")
    assert result.exit_code == 2, result.output
    said = _said(result.stderr)
    assert re.search(r"Cannot reach the API at http://127\.0\.0\.1:\d+: ConnectError: \S", said), (
        said
    )


class _Expiring(_Recording):
    """An API whose first token runs out before the first GET is answered; then a 429."""

    statuses: list[int]

    def do_GET(self) -> None:
        self._record()
        status = self.statuses.pop(0) if self.statuses else 200
        body = b"[]" if status == 200 else b'{"status": %d, "title": "no"}' % status
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.parametrize(
    ("statuses", "exit_code", "tokens"),
    [([401], 0, 2), ([401, 401], 1, 2), ([429], 2, 1)],
    ids=["expired-then-fresh", "refused-twice", "rate-limited"],
)
async def test_a_token_that_runs_out_is_taken_again_once_and_a_429_says_come_back(
    statuses: list[int], exit_code: int, tokens: int
) -> None:
    """`evaluate --wait` polls for up to an hour with the token it signed in with, which
    lives an hour by default: a 401 partway exited 1 as a refusal. A 429 is the API asking to
    come back, not a refusal: exit 2 as a 503 is."""
    seen: list[str] = []
    handler = type("Handler", (_Expiring,), {"seen": seen, "statuses": list(statuses)})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    env = {
        "MODEL_ROUTER_API_URL": f"http://127.0.0.1:{server.server_port}",
        "MODEL_ROUTER_CLIENT_ID": "guards",
        "MODEL_ROUTER_CLIENT_SECRET": "guards-secret",
    }
    try:
        result = await run(env, "deployments", "list")
    finally:
        server.shutdown()
        thread.join()
    assert result.exit_code == exit_code, result.output
    assert seen.count("POST /oauth/token") == tokens
