"""Counting a request's input tokens at the deployment a profile routes to now: the route is
decided as for a call without a run (the same policy, data classification and needs, so the
prompt goes nowhere a call could not), and the first routable candidate counts, if its
provider offers counting. Otherwise, or when it fails, the caller falls back to our estimate."""

from __future__ import annotations

import logging

from api.runtime import Runtime
from api.surface import Headers
from core.security import Principal
from domain.planner import PlanRequest
from providers.errors import ProviderError
from providers.secrets import SecretResolutionError
from providers.types import CallLimits, ChatRequest

log = logging.getLogger("model_router.api")


async def count_input_tokens(
    runtime: Runtime, principal: Principal, profile_id: str, chat: ChatRequest, headers: Headers
) -> int | None:
    view = await runtime.snapshots.view(principal.tenant_id)
    profile = view.current_profile(profile_id)  # 404 for an unknown profile
    needs = PlanRequest(
        tenant_id=principal.tenant_id,
        data_classification=headers.data_classification,
        needs_tools=bool(chat.tools),
        needs_structured_output=chat.response_format is not None,
    )
    plan = view.decide(profile, needs)
    targets = view.targets(plan.candidate_ids, profile.embedding_compatibility)
    if not targets:
        return None
    settings = runtime.settings
    limits = CallLimits(
        connect=settings.provider_connect_timeout_seconds,
        first_byte=settings.invoke_first_byte_timeout_seconds,
    )
    try:
        async with runtime.invoke.adapters.lease(targets[0]) as adapter:
            return await adapter.count_tokens(chat, limits=limits)
    except ProviderError as exc:
        # The class only: a provider's message could quote the prompt.
        if exc.kind.value != "unsupported":
            log.warning("token count at %s failed: %s", targets[0].deployment_id, exc.kind.value)
        return None
    except SecretResolutionError:
        log.warning("token count at %s failed: credentials", targets[0].deployment_id)
        return None
