"""Provider refusals whose code or words say more than their status, read as the kind that
sends the call where it can be answered: an account that cannot pay (Anthropic's credit balance
as a 400, its spend limits as 429s) is `quota` and falls back at once; Anthropic's prompt that
fits but not with its `max_tokens` is `context_length`; an OpenAI-compatible server's in-stream
error naming an HTTP status is that status; a request larger than the deployment's whole
tokens-per-minute limit is `quota`, tried once and no breaker strike; Azure's and OpenAI's
prompt filters are `content_policy`. And the transport's resend (providers/transport.py) is
only for the keep-alive race, never for a request the provider held, and the connect bound a
deployment sets holds past the pool's 5 s. Real SDKs over HTTP to the upstream simulator; the
gateway's cases through the API, PostgreSQL and Temporal."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select
from temporalio.client import Client

from providers.anthropic_adapter import AnthropicAdapter
from providers.base import ProviderAdapter
from providers.errors import ErrorKind, ProviderError
from providers.openai_adapter import OpenAIAdapter
from providers.secrets import Connection
from providers.transport import RESEND_WITHIN_SECONDS, HttpTransport
from providers.types import CallLimits, ChatRequest, Message, ProviderTimeouts
from providers.upstream import Fault, FaultKind, UpstreamServer
from store.tables import OutboxEventRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_deployment, profile_event, publish
from tests.helpers.deadline import UNBOUNDED
from tests.helpers.surfaces import receipt

MODEL = "kinds-sim"
HELLO = ChatRequest(messages=(Message(role="user", content="hello world"),))
TIMEOUTS = ProviderTimeouts(connect=2, read=5)

# The providers' own words (as of 2026), each as its API sends it.
CREDIT = (
    "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing "
    "to upgrade or purchase credits."
)
SPEND = "You have reached your specified API usage limits. You will regain access on 2027-01-01."
ON_HOLD = "This organization has been disabled."
OVERFLOW = (
    "input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000, decrease "
    "input length or `max_tokens` and try again"
)
TOO_LARGE = (
    "Request too large for gpt-4o in organization org-sim on tokens per min (TPM): Limit "
    "30000, Requested 36278. The input or output tokens must be reduced in order to run "
    "successfully. Visit https://platform.openai.com/account/rate-limits to learn more."
)
RATE_REACHED = (
    "Rate limit reached for gpt-4o in organization org-sim on tokens per min (TPM): Limit "
    "30000, Used 27000, Requested 5000. Please try again in 4.2s."
)
AZURE_FILTERED = (
    "The response was filtered due to the prompt triggering Azure OpenAI's content management "
    "policy. Please modify your prompt and retry."
)
FLAGGED = (
    "Invalid prompt: your prompt was flagged as potentially violating our usage policy. "
    "Please try again with a different prompt."
)


@pytest.fixture(autouse=True)
def fresh(upstream: UpstreamServer) -> None:
    upstream.state.reset()
    upstream.state.settings.clear()


def _adapter(
    upstream: UpstreamServer,
    provider: str,
    transport: HttpTransport = "aiohttp",
    timeouts: ProviderTimeouts = TIMEOUTS,
    base_url: str | None = None,
) -> ProviderAdapter:
    if provider == "anthropic":
        connection = _connection(base_url or upstream.base_url)
        return AnthropicAdapter(
            model=MODEL, connection=connection, timeouts=timeouts, transport=transport
        )
    connection = _connection(base_url or upstream.openai_base_url)
    return OpenAIAdapter(
        model=MODEL,
        connection=connection,
        timeouts=timeouts,
        provider="local-upstream",
        transport=transport,
    )


def _connection(base_url: str) -> Connection:
    return Connection.model_validate({"api_key": "sk-kinds-test", "base_url": base_url})


async def _failure(
    adapter: ProviderAdapter,
    streamed: bool,
    request: ChatRequest = HELLO,
    limits: CallLimits | None = None,
) -> ProviderError:
    async with adapter:
        with pytest.raises(ProviderError) as caught:
            if streamed:
                async for _ in adapter.stream(request, limits=limits):
                    pass
            else:
                await adapter.complete(request, limits=limits)
    return caught.value


STREAMED = pytest.mark.parametrize("streamed", [True, False], ids=["stream", "complete"])


@STREAMED
@pytest.mark.parametrize(
    ("fault", "kind", "status"),
    [
        (Fault(kind=FaultKind.QUOTA), ErrorKind.QUOTA, 400),
        (
            Fault(kind=FaultKind.RATE_LIMIT, code="enforced_spend_limit_reached", message=SPEND),
            ErrorKind.QUOTA,
            429,
        ),
        (
            Fault(kind=FaultKind.RATE_LIMIT, code="contract_spend_limit_reached", message=SPEND),
            ErrorKind.QUOTA,
            429,
        ),
        (
            Fault(kind=FaultKind.INVALID_REQUEST, code="organization_on_hold", message=ON_HOLD),
            ErrorKind.AUTH,
            400,
        ),
        # A rate limit that names no spend limit is still one.
        (Fault(kind=FaultKind.RATE_LIMIT), ErrorKind.RATE_LIMIT, 429),
    ],
    ids=["credit", "enforced-spend", "contract-spend", "on-hold", "rate-limit"],
)
async def test_an_anthropic_account_that_cannot_pay_is_quota_not_the_callers_request(
    upstream: UpstreamServer, fault: Fault, kind: ErrorKind, status: int, streamed: bool
) -> None:
    upstream.inject(MODEL, fault)
    error = await _failure(_adapter(upstream, "anthropic"), streamed)
    assert (error.kind, error.status_code) == (kind, status), error
    assert upstream.requests(MODEL) == 1


@STREAMED
async def test_an_openai_account_that_cannot_pay_is_quota(
    upstream: UpstreamServer, streamed: bool
) -> None:
    upstream.inject(MODEL, Fault(kind=FaultKind.QUOTA))
    error = await _failure(_adapter(upstream, "openai"), streamed)
    assert (error.kind, error.status_code) == (ErrorKind.QUOTA, 429)


@STREAMED
async def test_anthropics_prompt_that_fits_but_not_with_its_max_tokens_is_context_length(
    upstream: UpstreamServer, streamed: bool
) -> None:
    # The simulator refuses as Anthropic does: the prompt (a handful of tokens) fits the
    # window, not with the max_tokens asked for on top.
    upstream.state.configure(MODEL, context_window=500)
    request = HELLO.model_copy(update={"max_tokens": 1000})
    error = await _failure(_adapter(upstream, "anthropic"), streamed, request)
    assert error.kind is ErrorKind.CONTEXT_LENGTH, error
    assert error.reason and "exceed context limit" in error.reason
    # And in the words Anthropic uses for a real window, as a fault gives them.
    upstream.state.settings.clear()
    upstream.inject(MODEL, Fault(kind=FaultKind.CONTEXT_LENGTH, message=OVERFLOW))
    error = await _failure(_adapter(upstream, "anthropic"), streamed)
    assert error.kind is ErrorKind.CONTEXT_LENGTH, error


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (500, ErrorKind.SERVER),  # vLLM: the status as a number
        ("429", ErrorKind.RATE_LIMIT),  # LiteLLM: as text
        ("503", ErrorKind.SERVER),
        ("rate_limit_exceeded", ErrorKind.RATE_LIMIT),
        ("404", ErrorKind.NOT_FOUND),
    ],
    ids=lambda v: str(v),
)
async def test_an_in_stream_error_naming_an_http_status_is_read_as_that_status(
    upstream: UpstreamServer, code: str | int, kind: ErrorKind
) -> None:
    upstream.inject(MODEL, Fault(kind=FaultKind.STREAM_ERROR, after_chunks=0, code=code))
    error = await _failure(_adapter(upstream, "openai"), streamed=True)
    assert error.kind is kind, error


@STREAMED
async def test_a_request_larger_than_the_deployments_tpm_limit_is_quota(
    upstream: UpstreamServer, streamed: bool
) -> None:
    upstream.inject(MODEL, Fault(kind=FaultKind.RATE_LIMIT, message=TOO_LARGE, times=1))
    error = await _failure(_adapter(upstream, "openai"), streamed)
    assert error.kind is ErrorKind.QUOTA and not error.transient, error
    # A TPM limit reached by the requests before it passes: a rate limit, retried.
    upstream.inject(MODEL, Fault(kind=FaultKind.RATE_LIMIT, message=RATE_REACHED, times=1))
    error = await _failure(_adapter(upstream, "openai"), streamed)
    assert error.kind is ErrorKind.RATE_LIMIT and error.transient, error


@STREAMED
@pytest.mark.parametrize(
    "fault",
    [
        Fault(kind=FaultKind.CONTENT_POLICY, code="content_filter", message=AZURE_FILTERED),
        Fault(kind=FaultKind.INVALID_REQUEST, code="invalid_prompt", message=FLAGGED),
    ],
    ids=["azure-content-filter", "openai-invalid-prompt"],
)
async def test_azures_and_openais_prompt_filters_are_content_policy(
    upstream: UpstreamServer, fault: Fault, streamed: bool
) -> None:
    upstream.inject(MODEL, fault)
    error = await _failure(_adapter(upstream, "openai"), streamed)
    assert (error.kind, error.status_code) == (ErrorKind.CONTENT_POLICY, 400), error


@pytest.mark.parametrize("transport", ["aiohttp", "httpx2"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@STREAMED
async def test_a_request_the_provider_held_then_hung_up_on_is_not_sent_again(
    upstream: UpstreamServer, provider: str, transport: HttpTransport, streamed: bool
) -> None:
    """A server that took the request and died on it (a non-stream call's status line comes
    after the whole generation) is no keep-alive race: sent again at once, its work and its
    bill were doubled. The attempt fails as a connection error, for its retry rules."""
    delay = RESEND_WITHIN_SECONDS + 0.5
    upstream.inject(MODEL, Fault(kind=FaultKind.HANG_UP, delay=delay))
    error = await _failure(_adapter(upstream, provider, transport), streamed)
    assert error.kind is ErrorKind.CONNECTION, error
    assert upstream.requests(MODEL) == 1
    assert [r.status for r in upstream.state.ledger] == [0]  # never answered
    # A hang-up at once is still sent again (the race, as a fresh connection can meet it too).
    upstream.state.reset()
    upstream.inject(MODEL, Fault(kind=FaultKind.HANG_UP, delay=0, times=1))
    async with _adapter(upstream, provider, transport) as adapter:
        assert (await adapter.complete(HELLO)).text == "Echo: hello world"
    assert upstream.requests(MODEL) == 2


@pytest.fixture
def blackhole() -> Iterator[int]:
    """A port that accepts one connection and leaves every later handshake unanswered."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    held = socket.create_connection(("127.0.0.1", port))
    try:
        yield port
    finally:
        held.close()
        server.close()


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_connect_bound_past_the_pool_bound_holds(
    upstream: UpstreamServer, provider: str, blackhole: int
) -> None:
    """The SDKs' aiohttp transport hands httpx's `pool` bound to aiohttp as the bound on getting
    a connection at all: a deployment's `connect: 15` gave up at the pool's 5 s."""
    adapter = _adapter(upstream, provider)
    for limits, connect in ((CallLimits(connect=15), 15.0), (None, 2.0)):
        timeout = adapter.call_timeout(limits).get("timeout") or adapter.timeouts.as_timeout(
            adapter.timeout_type
        )
        assert (timeout.connect, timeout.pool) == (connect, max(connect, 5.0))
    await adapter.aclose()
    # Over the wire: a handshake never answered, the pool's bound shorter than the call's.
    tight = ProviderTimeouts(connect=0.2, read=5, pool=0.2)
    hole = _adapter(upstream, provider, timeouts=tight, base_url=f"http://127.0.0.1:{blackhole}/v1")
    began = time.monotonic()
    error = await _failure(hole, streamed=False, limits=CallLimits(connect=1.0))
    took = time.monotonic() - began
    assert error.kind is ErrorKind.TIMEOUT, error
    assert 1.0 <= took < UNBOUNDED, took  # the call's own bound, not the pool's 0.2 s


# Through the gateway: two deployments of each protocol, the second with the larger window.
ANTH_A, ANTH_B, OA_A, OA_B = "pk-anth-a", "pk-anth-b", "pk-oa-a", "pk-oa-b"


@pytest.fixture
async def auth(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> dict[str, str]:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    for protocol, (a, b) in (("anthropic", (ANTH_A, ANTH_B)), ("openai", (OA_A, OA_B))):
        tag = "anth" if protocol == "anthropic" else "oa"
        for dep, model, window in ((f"pk/{tag}-a", a, 150_000), (f"pk/{tag}-b", b, 200_000)):
            await approved_deployment(
                http,
                auth,
                temporal_client,
                tenant,
                dep,
                provider=protocol,
                model=model,
                endpointRef=upstream.endpoint_ref,
                contextWindowTokens=window,
            )
        solo = profile_event(f"pk-{tag}-solo", [f"pk/{tag}-a"])
        assert (await publish(http, auth, solo)).status_code == 200
        # A fallback needs a chain (of the same guarantees): the solo profile's, harmless here.
        fb = profile_event(
            f"pk-{tag}-fb",
            [f"pk/{tag}-a", f"pk/{tag}-b"],
            fallbackEnabled=True,
            fallbackChain=[f"pk-{tag}-solo"],
        )
        assert (await publish(http, auth, fb)).status_code == 200
    return auth


class Seen:
    """Requests each of two models got since it was made."""

    def __init__(self, upstream: UpstreamServer, a: str, b: str) -> None:
        self.up, self.models = upstream, (a, b)
        self.before = tuple(upstream.requests(m) for m in self.models)

    def __call__(self) -> tuple[int, ...]:
        return tuple(self.up.requests(m) - n for m, n in zip(self.models, self.before, strict=True))


async def _call(
    http: httpx.AsyncClient, auth: dict[str, str], profile: str, **body: Any
) -> tuple[httpx.Response, str]:
    key = f"pk-{uuid.uuid4().hex}"
    resp = await http.post(
        "/v1/chat/completions",
        headers={**auth, "Idempotency-Key": key},
        json={"model": profile, "messages": [{"role": "user", "content": "hello"}], **body},
    )
    return resp, key


async def _fallback_reasons(sessions: async_sessionmaker[AsyncSession], tenant: str) -> list[str]:
    async with sessions() as s:
        rows = await s.scalars(
            select(OutboxEventRow)
            .where(col(OutboxEventRow.tenant_id) == tenant)
            .where(col(OutboxEventRow.event_type) == "ModelFallbackUsed")
            .order_by(col(OutboxEventRow.position))
        )
        return [row.payload["reason"] for row in rows]


@pytest.mark.parametrize(
    "fault",
    [
        Fault(kind=FaultKind.QUOTA),
        Fault(kind=FaultKind.RATE_LIMIT, code="enforced_spend_limit_reached", message=SPEND),
    ],
    ids=["credit", "spend-limit"],
)
async def test_an_anthropic_account_that_cannot_pay_falls_back_at_once(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    fault: Fault,
) -> None:
    # Read as the caller's invalid request, the credit balance stopped the call (a 400, the
    # healthy second deployment never asked); read as a rate limit, the spend limit was tried
    # three times, a breaker strike each, before the second deployment was.
    upstream.inject(ANTH_A, fault)
    seen = Seen(upstream, ANTH_A, ANTH_B)
    resp, key = await _call(http, auth, "pk-anth-fb")
    assert resp.status_code == 200, resp.text
    assert resp.headers["X-Model-Router-Deployment"] == "pk/anth-b"
    assert seen() == (1, 1)
    assert (await receipt(sessions, tenant, key)).fallback_used
    assert await _fallback_reasons(sessions, tenant) == ["quota"]
    # Alone, it is the provider's permanent failure, not the caller's request.
    resp, key = await _call(http, auth, "pk-anth-solo")
    assert resp.status_code == 502 and resp.json()["errorClass"] == "permanent", resp.text
    assert (await receipt(sessions, tenant, key)).close_reason == "provider"


async def test_anthropics_overflow_with_max_tokens_moves_to_the_larger_window(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    upstream.state.configure(ANTH_A, context_window=500)
    seen = Seen(upstream, ANTH_A, ANTH_B)
    resp, key = await _call(http, auth, "pk-anth-fb", max_tokens=1000)
    assert resp.status_code == 200 and seen() == (1, 1), resp.text
    assert resp.headers["X-Model-Router-Deployment"] == "pk/anth-b"
    assert await _fallback_reasons(sessions, tenant) == ["context_length"]
    # Alone: the caller hears the context-length refusal agents compact on.
    resp, key = await _call(http, auth, "pk-anth-solo", max_tokens=1000)
    assert resp.status_code == 400 and "context_length" in resp.text, resp.text
    assert (await receipt(sessions, tenant, key)).close_reason == "context-length"


@pytest.mark.parametrize("code", [500, "429"], ids=["vllm-500", "litellm-429"])
async def test_an_in_stream_error_naming_a_transient_status_is_retried_then_answered(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    code: str | int,
) -> None:
    upstream.inject(OA_A, Fault(kind=FaultKind.STREAM_ERROR, after_chunks=0, code=code, times=1))
    seen = Seen(upstream, OA_A, OA_B)
    resp, key = await _call(http, auth, "pk-oa-solo")
    assert resp.status_code == 200 and seen() == (2, 0), resp.text
    row = await receipt(sessions, tenant, key)
    assert (row.outcome, row.deployment_id, row.provider_attempt) == ("Completed", "pk/oa-a", 2)


async def test_a_request_too_large_for_the_tpm_limit_moves_on_without_striking_the_breaker(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    # As a rate limit, each such request was sent three times and struck the breaker three
    # times (its threshold): one oversized request opened it for the tenant's other calls.
    upstream.inject(OA_A, Fault(kind=FaultKind.RATE_LIMIT, message=TOO_LARGE))
    for _ in range(3):
        seen = Seen(upstream, OA_A, OA_B)
        resp, _ = await _call(http, auth, "pk-oa-fb")
        assert resp.status_code == 200, resp.text
        # Asked once, never skipped as circuit open: the breaker stayed closed.
        assert seen() == (1, 1)
        assert resp.headers["X-Model-Router-Deployment"] == "pk/oa-b"
    assert await _fallback_reasons(sessions, tenant) == ["quota"] * 3
    upstream.state.clear_faults(OA_A)
    seen = Seen(upstream, OA_A, OA_B)
    resp, _ = await _call(http, auth, "pk-oa-solo")
    assert resp.status_code == 200 and seen() == (1, 0), resp.text


def test_a_request_too_large_for_the_tpm_limit_fails_an_evaluation_case_not_the_run() -> None:
    """Read as quota (no retry, no breaker strike, the next candidate), a request larger than a
    low tier's whole tokens-per-minute limit ended an evaluation as "provider refused the
    evaluation (quota)", a billing problem it is not: a context case sized past the tier's limit
    is that case failed, as a window too small fails it. An account out of credit still ends
    the run."""
    from temporalio.exceptions import ApplicationError

    from activities.evaluation_refusals import raise_unless_unanswered
    from providers.errors import kind_from_status, too_large_for_limit

    def refusal(status: int, code: str, message: str) -> ProviderError:
        kind = kind_from_status(status, code, message)
        return ProviderError(kind, provider="openai", status_code=status, code=code, reason=message)

    too_large = refusal(429, "rate_limit_exceeded", TOO_LARGE)
    assert too_large.kind is ErrorKind.QUOTA and too_large_for_limit(too_large)
    raise_unless_unanswered(too_large, "context-32k")  # the case unanswered: its verifier scores it
    broke = refusal(429, "insufficient_quota", "You exceeded your current quota.")
    assert broke.kind is ErrorKind.QUOTA and not too_large_for_limit(broke)
    with pytest.raises(ApplicationError, match=r"refused the evaluation \(quota\)"):
        raise_unless_unanswered(broke, "context-32k")
