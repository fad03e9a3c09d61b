"""Lifecycle actions from the console and the API: each one asked for leaves an audit line
naming who asked (the client id), the tenant, the deployment, the transition and what came of
it (nothing else records the actor), with the Retire form's optional reason and no content; and
a repeated action that finds the deployment already where it leads (a double-clicked Retire)
answers as done, not "Refused (409)"."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.helpers.browser import ConsoleSession
from tests.helpers.catalog import register

AUDIT = "model_router.audit"


@pytest.fixture
async def console(api_url: str, cli_env: dict[str, str]) -> AsyncIterator[ConsoleSession]:
    session, answer = await ConsoleSession.sign_in(
        api_url, cli_env["MODEL_ROUTER_CLIENT_ID"], cli_env["MODEL_ROUTER_CLIENT_SECRET"]
    )
    assert answer.status_code == 303, answer.text
    yield session
    await session.close()


@pytest.fixture
async def auth(http: httpx.AsyncClient, cli_env: dict[str, str]) -> dict[str, str]:
    token = (
        await http.post(
            "/oauth/token",
            data={"grant_type": "client_credentials"},
            auth=(cli_env["MODEL_ROUTER_CLIENT_ID"], cli_env["MODEL_ROUTER_CLIENT_SECRET"]),
        )
    ).json()["access_token"]
    return {"Authorization": f"Bearer {token}"}


def _lines(caplog: pytest.LogCaptureFixture, deployment_id: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == AUDIT and getattr(r, "deployment", None) == deployment_id
    ]


async def test_a_console_retire_is_audited_with_its_client_and_reason_and_a_repeat_is_done(
    console: ConsoleSession,
    http: httpx.AsyncClient,
    auth: dict[str, str],
    cli_env: dict[str, str],
    tenant: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=AUDIT)
    target = f"audit-{uuid.uuid4().hex[:6]}/console"
    await register(http, auth, target)
    form = {
        "id": target,
        "csrf_token": console.csrf,
        "reason": "superseded by\nv2 " + "x" * 150,  # a newline, and 200 characters at most
    }
    # Sent twice, as a double click sends it: the second finds it Retired already.
    for _ in range(2):
        done = await console.post("/console/deployment/retire", form)
        assert done.status_code == 303, done.text[:500]
        assert done.headers["location"].endswith("&done=retire")
    first, second = _lines(caplog, target)
    said = "superseded by v2 " + "x" * 150
    for line in (first, second):
        assert getattr(line, "client", None) == cli_env["MODEL_ROUTER_CLIENT_ID"]
        assert getattr(line, "tenant", None) == tenant
        assert "retire" in line.getMessage()
        assert getattr(line, "reason", None) == said
        # The message alone carries them too: plain-text logs print nothing else.
        assert f"tenant {tenant} " in line.getMessage()
        assert line.getMessage().endswith(f"; reason {said!r}")
    assert getattr(first, "outcome", None) == "done: Retired"
    assert getattr(second, "outcome", None) == "already Retired"
    page = await console.get(done.headers["location"])
    assert "Retire: done" in page.text and "Refused" not in page.text


async def test_a_reason_longer_than_the_form_takes_is_cut_not_a_refused_retire(
    console: ConsoleSession,
    http: httpx.AsyncClient,
    auth: dict[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A client without the form's maxlength (a script, an old page) sends 300 characters: the
    # Retire is done and the audit line keeps the first REASON_MAX (200) of them.
    caplog.set_level(logging.INFO, logger=AUDIT)
    target = f"audit-{uuid.uuid4().hex[:6]}/long"
    await register(http, auth, target)
    # The form says as much as the line keeps.
    form = await console.get("/console/deployment/confirm", id=target, action="retire")
    assert 'name="reason" maxlength="200"' in form.text
    reason = "".join(chr(ord("a") + i % 26) for i in range(300))
    done = await console.post(
        "/console/deployment/retire", {"id": target, "csrf_token": console.csrf, "reason": reason}
    )
    assert done.status_code == 303, done.text[:500]
    assert done.headers["location"].endswith("&done=retire")
    (line,) = _lines(caplog, target)
    assert getattr(line, "outcome", None) == "done: Retired"
    assert getattr(line, "reason", None) == reason[:200]
    assert line.getMessage().endswith(f"; reason {reason[:200]!r}")


async def test_a_refusal_that_is_no_repeat_still_shows_and_is_audited(
    console: ConsoleSession,
    http: httpx.AsyncClient,
    auth: dict[str, str],
    cli_env: dict[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=AUDIT)
    target = f"audit-{uuid.uuid4().hex[:6]}/refused"
    await register(http, auth, target)
    # A Candidate cannot be approved (no evidence): refused, and not as a repeat.
    refused = await console.post(
        "/console/deployment/approve", {"id": target, "csrf_token": console.csrf}
    )
    assert refused.status_code == 409 and "Refused (409)" in refused.text
    (line,) = _lines(caplog, target)
    assert getattr(line, "client", None) == cli_env["MODEL_ROUTER_CLIENT_ID"]
    assert getattr(line, "outcome", None) == "refused 409"


async def test_a_rest_retire_is_audited(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    cli_env: dict[str, str],
    tenant: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=AUDIT)
    target = f"audit-{uuid.uuid4().hex[:6]}/rest"
    await register(http, auth, target)
    retired = await http.post(f"/factory/model-deployments/{target}/retire", headers=auth)
    assert retired.status_code == 200, retired.text
    again = await http.post(f"/factory/model-deployments/{target}/retire", headers=auth)
    # A repeat is done, for the API as for the console's form, and audited as a repeat.
    assert again.status_code == 200 and again.json()["state"] == "Retired", again.text
    first, second = _lines(caplog, target)
    assert getattr(first, "client", None) == cli_env["MODEL_ROUTER_CLIENT_ID"]
    assert getattr(first, "tenant", None) == tenant
    assert f"tenant {tenant} " in first.getMessage() and "reason" not in first.getMessage()
    assert getattr(first, "outcome", None) == "done: Retired"
    assert getattr(second, "outcome", None) == "already Retired"


async def test_a_deployment_id_typed_with_a_line_break_forges_no_audit_line(
    console: ConsoleSession, caplog: pytest.LogCaptureFixture
) -> None:
    """A console form carries the id as typed: printed bare, a line break in it wrote a forged
    audit line of its own to plain-text logs."""
    caplog.set_level(logging.INFO, logger=AUDIT)
    forged = f"x-{uuid.uuid4().hex[:6]}\n2026-12-07 INFO model_router.audit lifecycle approve"
    done = await console.post(
        "/console/deployment/retire", {"id": forged, "csrf_token": console.csrf, "reason": "r"}
    )
    assert done.status_code < 500, done.text[:500]
    lines = [r.getMessage() for r in _lines(caplog, forged)]
    assert lines, "the refused retire is audited"
    for message in lines:
        assert "\n" not in message and repr(forged) in message
