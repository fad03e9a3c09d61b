"""Integration events: the cursor feed and webhook subscriptions."""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import datetime, timedelta
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Response
from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field, field_validator
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.service import RPCError

from activities.webhook_runs import start_delivery
from activities.webhook_signing import new_secret
from activities.webhook_targets import TargetRefused, pinned
from api.deps import RuntimeDep, SessionDep, TemporalDep, holds, require
from api.problems import Problem, field_refused
from core.security import Principal
from core.settings import Settings
from domain.access import Action
from domain.cloudevents import rfc3339, to_cloudevent
from domain.enums import Scope
from domain.events import TOPICS, readable, subscribed_types
from store.columns import utcnow
from store.db import transaction
from store.outbox_horizon import HorizonHidden, settled_or_hidden
from store.repositories import (
    OutboxRepository,
    OverlapRunning,
    WebhookSubscriptionRepository,
    feed_end,
    last_position,
)
from store.views import outbox_event
from store.webhook_tables import WebhookSubscriptionRow

log = logging.getLogger("model_router.api")
router = APIRouter(tags=["events"])

# A hidden writer is usually a migration or an operator's session under another role: ended
# within seconds to minutes.
HIDDEN_WRITER_RETRY_SECONDS = 10

Reader = Annotated[Principal, Depends(require(Scope.MODELS_READ, Action.READ_DEPLOYMENTS))]
Admin = Annotated[Principal, Depends(require(Scope.MODELS_ADMIN, Action.MANAGE_DEPLOYMENTS))]
EventName = Literal[
    "ModelProfileActivated",
    "ModelProfileRetired",
    "DeploymentStateChanged",
    "CapabilityEvidenceRecorded",
    "RoutePlanResolved",
    "ModelInvoked",
    "ModelFallbackUsed",
]
assert set(EventName.__args__) == set(TOPICS)  # type: ignore[attr-defined]

# outbox_events.position is a BIGINT (BIGSERIAL on PostgreSQL, SQLite's 64-bit rowid): a larger
# cursor cannot name an event, and asyncpg refuses to bind it (a 500 before this bound).
MAX_POSITION = 2**63 - 1


class EventPage(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    events: list[dict[str, object]]
    next_after: int = Field(alias="nextAfter", description="Pass as `after` to continue")


@router.get("/factory/events", response_model=EventPage, operation_id="ListEvents")
async def list_events(
    principal: Reader,
    session: SessionDep,
    after: Annotated[
        int, Query(ge=0, le=MAX_POSITION, description="Position of the last event already seen")
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> EventPage:
    rows = await OutboxRepository(session, principal.tenant_id).list_after(after, limit)
    # A token without factory.runs.read read every run's receipts here (ModelInvoked carries
    # the run, the deployment, tokens and cost): such events are left out of its pages, whose
    # cursor still moves past them.
    reads_runs = holds(principal, Scope.RUNS_READ, Action.READ_RUNS)
    # Likewise a deployment's events (its state, health and evidence) are for whom may list
    # deployments (GET /factory/model-deployments: the admin scope); the feed itself takes
    # factory.models.read.
    reads_deployments = holds(principal, Scope.MODELS_ADMIN, Action.READ_DEPLOYMENTS)
    events = [
        to_cloudevent(outbox_event(r))
        for r in rows
        if readable(r.event_type, reads_runs=reads_runs, reads_deployments=reads_deployments)
    ]
    return EventPage(events=events, next_after=int(rows[-1].position or 0) if rows else after)


# `webhook_subscriptions.url` is VARCHAR(2000). The bound is on the URL as stored, after
# normalising, which can lengthen it (a 719-character URL with non-ASCII characters became
# 4,219 percent-encoded ones): a longer one reached PostgreSQL and was a 500.
URL_MAX_LENGTH = 2000


class SubscriptionBody(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    url: AnyHttpUrl
    event_types: list[EventName] = Field(default_factory=list, alias="eventTypes")
    start_after: int | None = Field(
        default=None,
        alias="startAfter",
        ge=0,
        le=MAX_POSITION,
        description="Deliver events after this position; default: only events from now on.",
    )

    @field_validator("url")
    @classmethod
    def _fits_its_column(cls, url: AnyHttpUrl) -> AnyHttpUrl:
        if len(str(url)) > URL_MAX_LENGTH:
            raise ValueError(f"the URL is longer than {URL_MAX_LENGTH} characters")
        return url


class Subscription(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    subscription_id: uuid.UUID = Field(alias="subscriptionId")
    url: str
    event_types: list[str] = Field(alias="eventTypes")
    delivered_position: int = Field(alias="deliveredPosition")
    active: bool
    created_at: datetime = Field(alias="createdAt")
    failing_since: datetime | None = Field(
        alias="failingSince",
        description="Since when delivery has failed (each attempt is retried, in order: later "
        "events wait); null while it succeeds",
    )
    failed_attempts: int = Field(alias="failedAttempts", description="Attempts failed since then")
    last_error: str | None = Field(
        alias="lastError", description="Why the last attempt failed: a status or an error type"
    )
    previous_secret_until: datetime | None = Field(
        default=None,
        alias="previousSecretUntil",
        description="Until when deliveries are signed with the secret a rotation replaced as "
        "well; null: with the current one only",
    )


class CreatedSubscription(Subscription):
    signing_secret: str = Field(
        alias="signingSecret", description="Shown once: verifies the webhook-signature header."
    )


def _view(row: WebhookSubscriptionRow) -> Subscription:
    return Subscription(
        subscription_id=row.subscription_id,
        url=row.url,
        event_types=row.event_types,
        delivered_position=row.delivered_position,
        active=row.active,
        created_at=row.created_at,
        failing_since=row.failing_since,
        failed_attempts=row.failed_attempts,
        last_error=row.last_error,
        previous_secret_until=row.previous_secret_until,
    )


@router.post(
    "/factory/webhook-subscriptions",
    status_code=201,
    response_model=CreatedSubscription,
    operation_id="CreateWebhookSubscription",
)
async def create_subscription(
    body: SubscriptionBody, principal: Admin, runtime: RuntimeDep, temporal: TemporalDep
) -> CreatedSubscription:
    settings = runtime.settings
    event_types = _event_types(body, principal)
    # What refuses without the URL is asked first, in a transaction of its own: the lookup
    # below may take 5 s, and one tenant's admin creating subscriptions to unique names that
    # hang, though at the tenant's cap, started a lookup (a thread) for each before the 409
    # (under the cap, TENANT_LOOKUPS in activities/webhook_targets.py bounds them).
    # The lookup runs inside no transaction, so that it holds neither a pooled connection nor
    # the tenant's lock on creates (active_count) for those 5 s.
    async with transaction(runtime.sessions) as session:
        await _refuse_without_url(session, settings, principal.tenant_id, body.start_after)
    try:
        await pinned(
            str(body.url), settings.webhook_allowed_private_networks, tenant=principal.tenant_id
        )
    except TargetRefused as exc:
        raise field_refused("body.url", str(exc), f"url is not allowed: {exc}.") from None
    async with transaction(runtime.sessions) as session:
        subscriptions = WebhookSubscriptionRepository(session, principal.tenant_id)
        # Again, under the lock this time held until the row is added: a create that ended
        # meanwhile may have taken the last place.
        await _refuse_without_url(session, settings, principal.tenant_id, body.start_after)
        start = body.start_after
        if start is None:
            # The end of the feed as readers see it: an event still being written below the
            # last position is delivered (its transaction may commit after this one).
            start = await last_position(session, principal.tenant_id)
            try:
                settled = await settled_or_hidden(session)
            except HorizonHidden:
                raise Problem(
                    503,
                    "A database transaction this role cannot see is open (another role's, or a "
                    "prepared one): which events are settled cannot be told, and a subscription "
                    "started now could miss one or replay them all. Retry when it has ended.",
                    headers={"Retry-After": str(HIDDEN_WRITER_RETRY_SECONDS)},
                ) from None
            start = start if settled is None else min(start, settled)
        secret = new_secret()
        row = subscriptions.add(
            url=str(body.url),
            signing_secret=secret,
            event_types=event_types,
            delivered_position=start,
        )
    try:
        # Already running: the worker's upkeep (activities/webhook_runs.py) started it first.
        await start_delivery(
            temporal, settings, principal.tenant_id, str(row.subscription_id), start
        )
    except BaseException as exc:
        # Nothing would ever deliver to this subscription (Temporal went away after the
        # connect, or the request was cancelled), so it is not kept: it stayed listed as
        # active, for good, beside a 500. A run the start did leave finds it gone and ends.
        await asyncio.shield(_discard(runtime.sessions, principal.tenant_id, row))
        if not isinstance(exc, RPCError):
            raise
        log.warning("webhook delivery start refused: %s", exc.status.name)
        raise Problem(
            503,
            "Temporal did not take the subscription's delivery; it was not created. Retry.",
            headers={"Retry-After": "5"},
        ) from None
    return CreatedSubscription(**_view(row).model_dump(), signing_secret=secret)


def _event_types(body: SubscriptionBody, principal: Principal) -> list[str]:
    """The event types subscribed to, or a 422 naming body.eventTypes."""
    try:
        # A creator who may not read runs subscribes to none of a run's events (the feed
        # leaves them out of its pages too): they carry every run's receipts.
        return subscribed_types(
            list(body.event_types), reads_runs=holds(principal, Scope.RUNS_READ, Action.READ_RUNS)
        )
    except ValueError as exc:
        raise field_refused("body.eventTypes", str(exc), f"eventTypes: {exc}.") from None


async def _refuse_without_url(
    session: AsyncSession, settings: Settings, tenant_id: str, start_after: int | None
) -> None:
    """A 409 when the tenant holds as many active subscriptions as it may, a 422 when
    `start_after` is past the end of the feed; the count is under the tenant's lock on creates
    until the transaction ends (WebhookSubscriptionRepository.active_count)."""
    most = settings.webhook_max_subscriptions_per_tenant
    if await WebhookSubscriptionRepository(session, tenant_id).active_count() >= most:
        raise Problem(
            409,
            f"This tenant holds {most} active webhook subscriptions, the most it may "
            "(MODEL_ROUTER_WEBHOOK_MAX_SUBSCRIPTIONS_PER_TENANT): delete one first.",
        )
    if start_after is not None and start_after > await feed_end(session):
        # Events up to it would be passed over as they came: a typo dropped them silently.
        raise field_refused(
            "body.startAfter",
            "is past the end of the feed: events up to it would never be delivered",
            "startAfter is past the end of the feed.",
        )


async def _discard(
    sessions: async_sessionmaker[AsyncSession], tenant_id: str, row: WebhookSubscriptionRow
) -> None:
    async with transaction(sessions) as session:
        await WebhookSubscriptionRepository(session, tenant_id).discard(row.subscription_id)


@router.get(
    "/factory/webhook-subscriptions",
    response_model=list[Subscription],
    operation_id="ListWebhookSubscriptions",
)
async def list_subscriptions(principal: Admin, session: SessionDep) -> list[Subscription]:
    rows = await WebhookSubscriptionRepository(session, principal.tenant_id).list()
    return [_view(r) for r in rows]


@router.delete(
    "/factory/webhook-subscriptions/{subscriptionId}",
    status_code=204,
    operation_id="DeleteWebhookSubscription",
)
async def delete_subscription(
    subscriptionId: uuid.UUID,
    principal: Admin,
    runtime: RuntimeDep,
) -> Response:
    async with transaction(runtime.sessions) as session:
        subscriptions = WebhookSubscriptionRepository(session, principal.tenant_id)
        if not await subscriptions.deactivate(subscriptionId):
            raise Problem(404, f"No subscription {subscriptionId}.", field="subscriptionId")
    return Response(status_code=204)


# How long a rotation keeps signing with the secret it replaced, by default and at most: long
# enough for an operator to give the receiver the new one, short enough that a leaked one ends.
OVERLAP_DEFAULT_SECONDS = 86_400
OVERLAP_MAX_SECONDS = 7 * 86_400


class RotateBody(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    overlap_seconds: int = Field(
        default=OVERLAP_DEFAULT_SECONDS,
        alias="overlapSeconds",
        ge=0,
        le=OVERLAP_MAX_SECONDS,
        description="How long deliveries are signed with the replaced secret as well "
        "(0: at once with the new one only, for a leaked secret)",
    )


# The 409 of a rotation refused while the previous one's overlap runs (rotate_secret, below).
OVERLAP_RUNNING_TYPE = "https://model-router.dev/problems/webhook-secret-overlap-running"


@router.post(
    "/factory/webhook-subscriptions/{subscriptionId}/rotate-secret",
    response_model=CreatedSubscription,
    operation_id="RotateWebhookSecret",
    responses={
        404: {"description": "No such active subscription"},
        409: {
            "description": "The previous rotation's overlap still runs (`previousSecretUntil`): "
            "nothing changed"
        },
    },
)
async def rotate_secret(
    subscriptionId: uuid.UUID,
    principal: Admin,
    runtime: RuntimeDep,
    body: RotateBody | None = None,
) -> CreatedSubscription:
    """A new signing secret, shown once. Deliveries carry a signature by each secret for
    `overlapSeconds`, which a Standard Webhooks library accepts when either verifies: the
    receiver takes the new secret up with no delivery refused meanwhile. Its cursor, and
    events under way, are kept.

    While a previous rotation's overlap runs, a rotation with an overlap is a 409 and changes
    nothing: it would replace the secret that rotation issued and drop the one before it at
    once, which a receiver not switched yet still verifies with (every delivery then failed,
    until the subscription was ended). `overlapSeconds` 0 (a leaked secret) is taken whenever:
    the new secret alone, at once, every earlier one dropped."""
    overlap = (body or RotateBody()).overlap_seconds
    secret = new_secret()
    async with transaction(runtime.sessions) as session:
        try:
            row = await WebhookSubscriptionRepository(session, principal.tenant_id).rotate_secret(
                subscriptionId, secret, utcnow() + timedelta(seconds=overlap)
            )
        except OverlapRunning as running:
            until = rfc3339(running.until)
            raise Problem(
                409,
                f"Subscription {subscriptionId} is still signed with the secret its last "
                f"rotation replaced as well, until {until} (previousSecretUntil); a rotation now "
                "would drop that secret at once, and a receiver still verifying with it would "
                "refuse every delivery. Switch the receiver to the current secret (the one the "
                "last rotation showed) first, and rotate again once the overlap has ended; for "
                "a leaked secret, rotate with overlapSeconds 0 (the new secret alone, at once).",
                field="subscriptionId",
                previousSecretUntil=until,
                type_=OVERLAP_RUNNING_TYPE,
            ) from None
        if row is None:
            raise Problem(404, f"No subscription {subscriptionId}.", field="subscriptionId")
        view = _view(row)
    return CreatedSubscription(**view.model_dump(), signing_secret=secret)
