"""Counting a request's input tokens at the deployment a profile routes to now: routed as a chat
call without a run is (`Routes.route`: the same policy, data classification, needs and modality
check, so the prompt goes nowhere a call could not), the first target counts, if its provider
offers counting. Otherwise, or when it fails, the caller falls back to our estimate. A count the
tenant policy refuses is refused as the call is (403)."""

from __future__ import annotations

import logging

from api.refusals import problem_of
from api.runtime import Runtime
from api.surface import Headers
from core.security import Principal
from domain.invocation import Operation
from domain.planner import PlanRequest
from providers.errors import ProviderError
from providers.secrets import SecretResolutionError
from providers.types import CallLimits, ChatRequest
from routing.refusals import NoneAvailable, Refusal

log = logging.getLogger("model_router.api")


async def count_input_tokens(
    runtime: Runtime, principal: Principal, profile_id: str, chat: ChatRequest, headers: Headers
) -> int | None:
    """The deployment's count, or None for our estimate. An unknown profile, one that does not
    answer messages (an embedding profile), or a call the tenant policy denies every deployment
    of (its data classification, say) is refused as a call would be; a profile with nothing
    routable now is counted by our estimate, its prompt sent nowhere."""
    needs = PlanRequest(
        tenant_id=principal.tenant_id,
        data_classification=headers.data_classification,
        needs_tools=bool(chat.tools),
        needs_structured_output=chat.response_format is not None,
    )
    try:
        # Routed as a chat call without a run is: the rule lives in routing, not here. On the
        # catalog's current version, read now: a call's route planned on this process's
        # snapshot is checked by its receipt's claim, and a count has no claim. Planned on the
        # snapshot, a count sent the prompt to a deployment retired, or denied by a policy
        # changed, since the snapshot was built.
        route = await runtime.routes.route(needs, profile_id, None, Operation.CHAT)
    except NoneAvailable:  # transient: the same call may be served in a moment
        return None
    except Refusal as refused:
        # UnknownProfile, WrongModality: the caller's request is wrong. PolicyDenied: nothing
        # will serve it until the data classification or the policy changes; counted by our
        # estimate, a 200 told a client budgeting its prompt that the call would go ahead, and
        # the call with the same body and header was then a 403.
        raise problem_of(refused, lambda _: 0, "body.model") from None
    target = route.targets[0]
    settings = runtime.settings
    limits = CallLimits(
        connect=settings.provider_connect_timeout_seconds,
        first_byte=settings.invoke_first_byte_timeout_seconds,
    )
    try:
        # The principal's deployment: a reference kept for other tenants is not counted there.
        async with runtime.invoke.adapters.lease(target, principal.tenant_id) as adapter:
            return await adapter.count_tokens(chat, limits=limits)
    except ProviderError as exc:
        # The class only: a provider's message could quote the prompt.
        if exc.kind.value != "unsupported":
            log.warning("token count at %s failed: %s", target.deployment_id, exc.kind.value)
        return None
    except SecretResolutionError:
        log.warning("token count at %s failed: credentials", target.deployment_id)
        return None
