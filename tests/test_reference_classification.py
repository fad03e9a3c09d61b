"""A Responses item reference brings a stored answer into the new call's input, to whichever
deployment that call is routed to: the answer's data classification bounds it. The receipt
keeps the call's classification from its claim (migration 0023), and a reference to an answer
produced under a higher one than the call's is a 400 naming the reference, before any provider
sees the call. Without it, an Internal call (the default) referring to an answer of a
Restricted call, made on a Local deployment, had that answer sent to a Regional one (the
security review's data-classification bypass). A call of the answer's classification or higher
is served as before; a receipt from before the column reads as Internal. The openai SDK is the
client, the local upstream the provider."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
import sqlalchemy as sa
from openai import AsyncOpenAI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col
from temporalio.client import Client

from api.responses_answers import answered_by
from providers.upstream import ChatTurn, Reply, UpstreamServer, default_responder
from store.db import transaction
from store.receipt_statements import Claim, ReceiptStatements
from store.receipts import by_key
from store.tables import InvocationReceiptRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_profile
from tests.helpers.invocations import invocation_input
from tests.helpers.surfaces import Catalog, receipt

PUBLIC, INTERNAL, CONFIDENTIAL, RESTRICTED = "Public", "Internal", "Confidential", "Restricted"


@dataclass
class Profiles:
    """A profile on a Local deployment (which the baseline policy lets Confidential and
    Restricted data reach) and the catalog's, on a Regional one (Public and Internal only)."""

    local: str
    local_model: str
    regional: str
    regional_model: str

    def for_(self, classification: str | None) -> tuple[str, str]:
        """The profile a call of this classification may be routed on, and its model."""
        if classification in (CONFIDENTIAL, RESTRICTED):
            return self.local, self.local_model
        return self.regional, self.regional_model


@pytest.fixture
async def client(api_url: str, token_for: TokenFactory, tenant: str) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(
        base_url=f"{api_url}/v1", api_key=await token_for(tenant), max_retries=0
    ) as c:
        yield c


@pytest.fixture
async def profiles(
    http: httpx.AsyncClient,
    catalog: Catalog,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> Profiles:
    local, model = f"local-{catalog.tag}", f"local-model-{catalog.tag}"
    deployment = {
        "endpointRef": upstream.endpoint_ref,
        "model": model,
        "region": "local",
        "privacyClass": "Local",
    }
    await approved_profile(
        http,
        catalog.auth,
        temporal_client,
        catalog.tenant,
        local,
        {f"sim/local-{catalog.tag}": deployment},
        privacyClass="Local",
        allowedRegions=["local"],
    )
    return Profiles(local, model, catalog.profile("openai"), catalog.model("openai"))


@pytest.fixture
def turns(upstream: UpstreamServer, profiles: Profiles) -> Iterator[list[ChatTurn]]:
    """The requests both profiles' models got, each answered as the upstream does by default."""
    seen: list[ChatTurn] = []

    def record(turn: ChatTurn) -> Reply:
        seen.append(turn)
        return default_responder(turn)

    for model in (profiles.local_model, profiles.regional_model):
        upstream.register(model, record)
    yield seen
    for model in (profiles.local_model, profiles.regional_model):
        upstream.register(model, default_responder)


async def _answer(
    client: AsyncOpenAI,
    profiles: Profiles,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    classification: str | None,
    said: str,
) -> str:
    """An answer made as a call of `classification` (None: no header, Internal), its receipt
    checked to hold it; the id of its output message."""
    key = f"rc-{uuid.uuid4().hex}"
    headers = {"Idempotency-Key": key}
    if classification is not None:
        headers["X-Data-Classification"] = classification
    profile, _ = profiles.for_(classification)
    answered = await client.responses.create(model=profile, input=said, extra_headers=headers)
    assert answered.output_text == f"Echo: {said}"
    row = await receipt(sessions, tenant, key)
    assert row.data_classification == (classification or INTERNAL)
    ref = answered.output[0].id
    assert ref is not None
    return ref


def _follow(ref: str, before: str | None = None) -> Any:
    """A turn referring to `ref` at input.2 (after a reference to `before`, if given)."""
    first: dict[str, Any] = (
        {"type": "item_reference", "id": before}
        if before is not None
        else {"role": "user", "content": "first"}
    )
    return [
        first,
        {"role": "user", "content": "and then"},
        {"type": "item_reference", "id": ref},
        {"role": "user", "content": "go on"},
    ]


async def _refer(
    client: AsyncOpenAI,
    profiles: Profiles,
    classification: str | None,
    request: Any,
    *,
    key: str | None = None,
    stream: bool = False,
) -> Any:
    headers = {"Idempotency-Key": key or f"rc-{uuid.uuid4().hex}"}
    if classification is not None:
        headers["X-Data-Classification"] = classification
    profile, _ = profiles.for_(classification)
    return await client.responses.create(
        model=profile, input=request, extra_headers=headers, stream=stream
    )


def _refused_above(
    refused: openai.BadRequestError, sent_as: str, produced: str | None, said: str
) -> None:
    """A 400 naming the reference at input.2, saying the call's classification, never quoting
    the answer nor naming the classification it was produced under."""
    error: Any = refused.body
    assert (error["param"], error["type"]) == ("input.2.id", "invalid_request_error"), error
    assert "higher data classification" in error["message"], error
    assert f"({sent_as})" in error["message"], error
    assert said not in refused.response.text, refused.response.text
    assert produced is None or produced not in error["message"], error


async def test_a_higher_classified_answer_is_refused_from_a_lower_classified_call(
    client: AsyncOpenAI,
    profiles: Profiles,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    upstream: UpstreamServer,
    turns: list[ChatTurn],
) -> None:
    """An answer of a Restricted call, made on the Local deployment, referred to from a call
    without a classification (Internal), an explicit Internal or Public one (routed to the
    Regional deployment) or a Confidential one: each a 400 naming the reference, whole or
    streamed, and neither deployment gets a second request. So is a Confidential answer from
    an Internal call. A reference to an answer of the call's own classification before it
    does not hide it."""
    secret = f"restricted words {uuid.uuid4().hex[:8]}"
    restricted = await _answer(client, profiles, sessions, tenant, RESTRICTED, secret)
    internal = await _answer(client, profiles, sessions, tenant, None, "plain words")
    assert len(turns) == 2
    for sent_as, stream in (
        (None, False),
        (None, True),
        (INTERNAL, False),
        (PUBLIC, False),
        (CONFIDENTIAL, False),
    ):
        before = internal if sent_as in (None, INTERNAL, CONFIDENTIAL) else None
        with pytest.raises(openai.BadRequestError) as refused:
            await _refer(client, profiles, sent_as, _follow(restricted, before), stream=stream)
        _refused_above(refused.value, sent_as or INTERNAL, RESTRICTED, secret)
    confidential_said = f"confidential words {uuid.uuid4().hex[:8]}"
    confidential = await _answer(
        client, profiles, sessions, tenant, CONFIDENTIAL, confidential_said
    )
    assert len(turns) == 3
    with pytest.raises(openai.BadRequestError) as refused:
        await _refer(client, profiles, INTERNAL, _follow(confidential))
    _refused_above(refused.value, INTERNAL, CONFIDENTIAL, confidential_said)
    assert len(turns) == 3  # the answers' own calls only: nothing referred reached a provider
    assert upstream.requests(profiles.regional_model) == 1
    assert upstream.requests(profiles.local_model) == 2


async def test_the_same_reference_from_an_equal_or_higher_classified_call_is_accepted(
    client: AsyncOpenAI,
    profiles: Profiles,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    turns: list[ChatTurn],
) -> None:
    """A Confidential answer referred to from a Confidential and a Restricted call, a
    Restricted one from a Restricted call, an Internal one from an Internal call: each served,
    the answer sent as the assistant's turn, and each receipt holding its own call's
    classification (an answer that brought a Restricted one in is itself Restricted)."""
    answers = {
        CONFIDENTIAL: await _answer(client, profiles, sessions, tenant, CONFIDENTIAL, "conf"),
        RESTRICTED: await _answer(client, profiles, sessions, tenant, RESTRICTED, "restr"),
        INTERNAL: await _answer(client, profiles, sessions, tenant, INTERNAL, "intl"),
    }
    said = {CONFIDENTIAL: "Echo: conf", RESTRICTED: "Echo: restr", INTERNAL: "Echo: intl"}
    for produced, sent_as in (
        (CONFIDENTIAL, CONFIDENTIAL),
        (CONFIDENTIAL, RESTRICTED),
        (RESTRICTED, RESTRICTED),
        (INTERNAL, INTERNAL),
        (INTERNAL, None),
    ):
        key = f"rc-{uuid.uuid4().hex}"
        served = await _refer(client, profiles, sent_as, _follow(answers[produced]), key=key)
        assert served.output_text == "Echo: go on"
        assert [(m.role, m.text) for m in turns[-1].messages] == [
            ("user", "first"),
            ("user", "and then"),
            ("assistant", said[produced]),
            ("user", "go on"),
        ]
        assert turns[-1].model == profiles.for_(sent_as)[1]
        row = await receipt(sessions, tenant, key)
        assert row.data_classification == (sent_as or INTERNAL)


async def test_a_receipt_from_before_the_column_reads_as_internal(
    client: AsyncOpenAI,
    profiles: Profiles,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    turns: list[ChatTurn],
) -> None:
    """A receipt claimed before migration 0023 has no classification (null): its answer reads
    as Internal, the classification of a call without one. So an Internal call may refer to it
    (a conversation goes on across the upgrade) and a Public one may not."""
    ref = await _answer(client, profiles, sessions, tenant, RESTRICTED, "from before")
    async with transaction(sessions) as session:
        await session.execute(
            sa.update(InvocationReceiptRow)
            .where(col(InvocationReceiptRow.tenant_id) == tenant)
            .where(col(InvocationReceiptRow.invocation_id) == answered_by(ref))
            .values(data_classification=None)
        )
    served = await _refer(client, profiles, INTERNAL, _follow(ref))
    assert served.output_text == "Echo: go on"
    assert ("assistant", "Echo: from before") in [(m.role, m.text) for m in turns[-1].messages]
    with pytest.raises(openai.BadRequestError) as refused:
        await _refer(client, profiles, PUBLIC, _follow(ref))
    _refused_above(refused.value, PUBLIC, None, "from before")


async def test_every_claim_writes_the_calls_classification(
    store: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    """The claim on each engine and way (PostgreSQL's straight on asyncpg, alone and with its
    catalog version check; SQLAlchemy Core's, the one SQLite has; a denial's) writes the
    call's classification as one more column of the row it inserts (domain/receipt_fields.py
    `claim_values`), never a statement of its own."""
    engine = store.kw["bind"]
    ways = [ReceiptStatements(engine)]
    if engine.dialect.name == "postgresql":
        ways.append(ReceiptStatements(engine, direct=True))
    written: dict[str, str] = {}
    try:
        for statements in ways:
            for classification in (PUBLIC, CONFIDENTIAL, RESTRICTED):
                claimed = invocation_input(tenant)
                claimed.data_classification = classification
                assert await statements.claim(claimed, "sim/a")
                written[claimed.idempotency_key] = classification
                at_version = invocation_input(tenant)
                at_version.data_classification = classification
                version = await statements.catalog_version()
                assert await statements.claim_at(at_version, "sim/a", version) is Claim.CLAIMED
                written[at_version.idempotency_key] = classification
            denied = invocation_input(tenant)
            denied.data_classification = RESTRICTED
            assert await statements.deny(denied, "privacy_denied_by_policy") is not None
            written[denied.idempotency_key] = RESTRICTED
    finally:
        for statements in ways:
            await statements.aclose()
    async with store() as session:
        for key, classification in written.items():
            row = await by_key(session, tenant, key)
            assert row is not None and row.data_classification == classification, key
