"""A provider's usage report that cannot be true (a negative count, one past what a receipt's
INTEGER holds, or a figure that is no whole number) is treated as no report: the call answers
once, its receipt closes Estimated with our own count, and the reconciler settles it from the
provider's statement. A cost past what a receipt's NUMERIC(18, 8) holds is left unknown, and a
provider request id past its VARCHAR(200) is left out. Before, a count, cost or id past its
column made the receipt's close fail in the store on every retry, so the receipt stayed open
for good and the caller waited on it; a fraction failed the call as a malformed stream, tried
three times and paid each time."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from domain.provider_reports import token_count
from providers.upstream import UpstreamServer
from providers.upstream.turn import ChatTurn, Reply
from providers.usage_figures import count, counts
from tests.conftest import TokenFactory
from tests.helpers.catalog import profile_event, publish, record_evidence, register
from tests.helpers.gateway_calls import invoke
from tests.helpers.gateway_calls import stored as stored_receipt

INT4_MAX = 2**31 - 1
HUGE_PRICE = "9999999999.99999999"  # the largest price a revision holds, USD per million tokens


@pytest.fixture
async def auth(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> dict[str, str]:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    entries = [
        {
            "provider": provider,
            "model": f"ur-{provider}",
            "inputUsdPerMtok": HUGE_PRICE,
            "outputUsdPerMtok": "1",
            "effectiveFrom": "2026-01-01",
        }
        for provider in ("openai", "anthropic")
    ]
    prices = {"revision": "ur-1", "entries": entries}
    published = await http.post("/factory/pricebook-revisions", json=prices, headers=auth)
    assert published.status_code == 201, published.text
    for provider in ("openai", "anthropic"):
        dep = f"ur/{provider}"
        await register(
            http,
            auth,
            dep,
            model=f"ur-{provider}",
            provider=provider,
            endpointRef=upstream.endpoint_ref,
        )
        await record_evidence(temporal_client, tenant, dep, {"tool-calling": 0.9})
        approved = await http.post(f"/factory/model-deployments/{dep}/approve", headers=auth)
        assert approved.status_code == 200, approved.text
        event = profile_event(f"ur-{provider}", [dep], {}, priceBasis="ur-1")
        assert (await publish(http, auth, event)).status_code == 200
    return auth


@pytest.fixture(params=["openai", "anthropic"])
def provider(request: pytest.FixtureRequest) -> str:
    """Each case runs against both protocols' adapters."""
    return str(request.param)


@pytest.fixture(params=[False, True], ids=["json", "sse"])
def stream(request: pytest.FixtureRequest) -> bool:
    """…and through a JSON answer and a streamed one."""
    return bool(request.param)


def _reporting(**usage: object) -> Any:
    def responder(turn: ChatTurn) -> Reply:
        return Reply(text="a fine answer", **usage)

    return responder


async def _invoke(
    http: httpx.AsyncClient, auth: dict[str, str], provider: str, stream: bool
) -> dict[str, Any]:
    """The call's receipt as the caller got it, the answer whole."""
    text, receipt = await invoke(http, auth, f"ur-{provider}", stream=stream)
    assert text == "a fine answer"
    return receipt


@pytest.mark.parametrize(
    "usage",
    [
        {"reported_input_tokens": 2**40},
        {"reported_output_tokens": INT4_MAX + 1},
        {"reported_output_tokens": -3},
        {"reported_input_tokens": 12.5},
        {"reported_output_tokens": "12"},
    ],
    ids=["input-past-int4", "output-past-int4", "negative-output", "fraction", "string"],
)
async def test_an_impossible_usage_report_closes_the_receipt_with_our_own_count(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    provider: str,
    stream: bool,
    usage: dict[str, object],
) -> None:
    upstream.register(f"ur-{provider}", _reporting(**usage))
    calls = upstream.state.stats.count(f"ur-{provider}")
    receipt = await _invoke(http, auth, provider, stream)
    assert receipt["outcome"] == "Completed"
    assert receipt["usageStatus"] == "Estimated"
    assert upstream.state.stats.count(f"ur-{provider}") == calls + 1  # one call, paid once
    stored = await stored_receipt(http, auth, receipt)
    assert stored["outcome"] == "Completed" and stored["usageStatus"] == "Estimated"
    assert 0 < stored["inputTokens"] < 100 and 0 < stored["outputTokens"] < 100
    assert Decimal(stored["estimatedCostUsd"]) == Decimal(receipt["estimatedCostUsd"])


async def test_a_whole_number_written_as_a_decimal_is_a_count(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    provider: str,
    stream: bool,
) -> None:
    # Some servers write counts as 17.0: the count is 17, reported.
    upstream.register(f"ur-{provider}", _reporting(reported_output_tokens=17.0))
    receipt = await _invoke(http, auth, provider, stream)
    assert receipt["usageStatus"] == "Reported" and receipt["outputTokens"] == 17


def test_a_figure_is_a_count_only_as_a_whole_json_number() -> None:
    assert [token_count(f) for f in (0, 12, 12.0, 2**40)] == [0, 12, 12, 2**40]
    assert [token_count(f) for f in (12.5, "12", True, None, [12], {"n": 12}, float("inf"))] == [
        None
    ] * 7
    # Read at the adapter boundary: one figure that states no count leaves the report out.
    assert counts(3, 4.0) == (3, 4) and counts(3, "4") is None
    assert count(None) is None and count(7) == 7 and count(7.5) is None


async def test_a_cost_past_what_a_receipt_holds_is_left_unknown(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    provider: str,
    stream: bool,
) -> None:
    # A true report at the largest price a revision holds: 1.5 million tokens cost 1.5e10 USD,
    # past NUMERIC(18, 8)'s 9,999,999,999.99999999.
    upstream.register(f"ur-{provider}", _reporting(reported_input_tokens=1_500_000))
    receipt = await _invoke(http, auth, provider, stream)
    assert receipt["outcome"] == "Completed" and receipt["usageStatus"] == "Reported"
    assert receipt.get("estimatedCostUsd") is None
    stored = await stored_receipt(http, auth, receipt)
    assert stored["inputTokens"] == 1_500_000 and stored["estimatedCostUsd"] is None

    # A cost that fits is still priced: the same price, 100 tokens (and the output at 1 USD per
    # million), to the receipt's eight decimals.
    upstream.register(f"ur-{provider}", _reporting(reported_input_tokens=100))
    priced = await _invoke(http, auth, provider, stream)
    exact = (Decimal(HUGE_PRICE) * 100 + priced["outputTokens"]) / 1_000_000
    assert Decimal(priced["estimatedCostUsd"]) == exact.quantize(
        Decimal("1e-8"), rounding=ROUND_HALF_UP
    )


async def test_a_provider_request_id_past_what_a_receipt_holds_is_left_out(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    provider: str,
    stream: bool,
) -> None:
    # A proxy in front of the provider chaining its own id onto the provider's: 300 characters
    # and more, against the receipt's VARCHAR(200).
    model = f"ur-{provider}"
    upstream.register(model, _reporting())
    upstream.state.configure(model, request_id_prefix="req_" + "x" * 300)
    try:
        receipt = await _invoke(http, auth, provider, stream)
    finally:
        upstream.state.configure(model, request_id_prefix="req_")
    assert receipt["outcome"] == "Completed" and receipt["usageStatus"] == "Reported"
    assert receipt.get("providerRequestId") is None
    stored = await stored_receipt(http, auth, receipt)
    assert stored["providerRequestId"] is None and stored["outcome"] == "Completed"

    # An id that fits is kept.
    receipt = await _invoke(http, auth, provider, stream)
    assert (await stored_receipt(http, auth, receipt))["providerRequestId"].startswith("req_")
