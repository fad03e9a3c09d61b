"""Building the invocation activities from settings (shared by API processes and workers)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
from collections.abc import Callable
from typing import Any, TypeVar

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

_T = TypeVar("_T")


class InlineWorkflowTasks(concurrent.futures.ThreadPoolExecutor):
    """Runs each InvokeModel activation on the event loop's own thread, at once, instead of
    handing it to a pool thread and back. Two activations per invocation (the eager start, the
    local activity's result) each cost a thread switch and a wait for the GIL while the loop
    relays other calls: three quick benches of each, alternating (2026-12-01), put the API's
    CPU per call at c=16 at 16.7 / 12.4 / 12.5 ms on a pool thread and 9.7 / 9.3 / 11.2 here,
    c=16 non-stream at 35 / 76 / 73 and 93 / 100 / 82 calls/s. The workflow is a few lines with
    no I/O and a replay test, so the SDK's deadlock guard (2 s on a pool thread) has nothing to
    catch; an activation that did block would block this process's loop, which is why only
    InvokeModel's worker uses this executor."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="invoke_workflow_unused")

    def submit(
        self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[_T]:
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        loop = asyncio.get_running_loop()

        def activate() -> None:
            # The activation sets its own loop as the running one and clears it when done: put
            # this one back. A fresh context, as a pool thread would have, keeps the caller's
            # context variables out of the workflow.
            try:
                future.set_result(contextvars.Context().run(fn, *args, **kwargs))
            except BaseException as exc:  # the SDK awaits it, as it would from a pool thread
                future.set_exception(exc)
            finally:
                asyncio._set_running_loop(loop)

        # From the loop itself, not inside the SDK task that asked: Python 3.14 refuses to step
        # the workflow's own tasks while another task on this thread is mid-step.
        loop.call_soon(activate)
        return future


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
