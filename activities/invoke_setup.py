"""Building the invocation activities from settings (shared by API processes and workers)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.worker import UnsandboxedWorkflowRunner

from activities.adapter_pool import AdapterPool
from activities.invoke import InvokeActivities
from activities.invoke_hub import InvocationHub
from activities.resilience import Resilience
from activities.secret_policy import endpoint_broker
from core.settings import Settings
from providers.types import ProviderTimeouts
from store.artifacts import ArtifactStore
from store.receipt_statements import ReceiptStatements

# InvokeModel runs once per invocation, in the API process: the sandbox re-imports its module
# for every run, which cost ~6 ms to the local activity and about an eighth of the API's CPU
# under load (py-spy, bench/). The workflow is a few lines that import only temporalio and
# domain.invocation, touch no clock, random or I/O, and a replay test checks it stays
# deterministic (tests/test_invoke_replay.py). Every other workflow keeps the sandbox.
INVOKE_WORKFLOW_RUNNER = UnsandboxedWorkflowRunner()


def provider_timeouts(settings: Settings) -> ProviderTimeouts:
    return ProviderTimeouts(
        connect=settings.provider_connect_timeout_seconds,
        read=settings.provider_read_timeout_seconds,
    )


def invoke_activities(
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    hub: InvocationHub,
    statements: ReceiptStatements | None = None,
) -> tuple[InvokeActivities, AdapterPool]:
    adapters = AdapterPool(
        endpoint_broker(settings),
        provider_timeouts(settings),
        ttl_seconds=settings.invoke_adapter_ttl_seconds,
        prompt_caching=settings.prompt_caching,
    )
    return InvokeActivities(
        sessions,
        hub,
        adapters,
        ArtifactStore(settings.artifact_root),
        Resilience.from_settings(settings),
        statements,
    ), adapters
