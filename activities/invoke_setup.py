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
from domain.invocation import invocation_of
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


# The longest a workflow's first activation waits for the call it will adopt. Well inside the
# SDK's deadlock detector (2 s from the activation's hand-over to this executor): a longer call
# is adopted in flight, as it always was.
HOLD_SECONDS = 0.5

# What an activation may wait for before it runs (None: run at once).
Hold = Callable[[Any], "asyncio.Future[None] | None"]


class InlineWorkflowTasks(concurrent.futures.ThreadPoolExecutor):
    """Runs each InvokeModel activation on the event loop's own thread, at once, instead of
    handing it to a pool thread and back. Two activations per invocation (the eager start, the
    local activity's result) each cost a thread switch and a wait for the GIL while the loop
    relays other calls: three quick benches of each, alternating (2026-12-01), put the API's
    CPU per call at c=16 at 16.7 / 12.4 / 12.5 ms on a pool thread and 9.7 / 9.3 / 11.2 here,
    c=16 non-stream at 35 / 76 / 73 and 93 / 100 / 82 calls/s. The workflow is a few lines with
    no I/O and a replay test, so the SDK's deadlock guard (2 s on a pool thread) has nothing to
    catch; an activation that did block would block this process's loop, which is why only
    InvokeModel's worker uses this executor.

    `hold`: what an activation waits for first, at most HOLD_SECONDS (`first_activation_hold`:
    the first activation of an invocation whose call this process began waits for that call's
    outcome). That activation only schedules the local activity that adopts the call; run while
    the call is in flight, it and the activity's start ran on this loop between the provider's
    last chunk and the receipt's close, on the response's path (the timeline of a c=1 call)."""

    def __init__(self, hold: Hold | None = None) -> None:
        super().__init__(max_workers=1, thread_name_prefix="invoke_workflow_unused")
        self._hold = hold

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

        wait = self._hold(args[0]) if self._hold is not None and args else None
        if wait is None:
            # From the loop itself, not inside the SDK task that asked: Python 3.14 refuses to
            # step the workflow's own tasks while another task on this thread is mid-step.
            loop.call_soon(activate)
        else:
            _when_done_or_after(loop, wait, HOLD_SECONDS, activate)
        return future


def _when_done_or_after(
    loop: asyncio.AbstractEventLoop,
    wait: asyncio.Future[None],
    bound: float,
    run: Callable[[], None],
) -> None:
    """`run` once, from a loop callback: when `wait` is done or `bound` seconds have passed."""
    ran = False

    def once(_: object = None) -> None:
        nonlocal ran
        if not ran:
            ran = True
            timer.cancel()
            run()

    timer = loop.call_later(bound, once)
    wait.add_done_callback(once)


def first_activation_hold(hub: InvocationHub) -> Hold:
    """For the API's InvokeModel worker: the first activation of an invocation (it initialises
    the workflow) waits for the call this process began for it, as `hub.holding` says."""

    def hold(activation: Any) -> asyncio.Future[None] | None:
        for job in getattr(activation, "jobs", ()):
            if job.HasField("initialize_workflow"):
                found = invocation_of(job.initialize_workflow.workflow_id)
                return hub.holding(found) if found is not None else None
        return None

    return hold


def provider_timeouts(settings: Settings) -> ProviderTimeouts:
    return ProviderTimeouts(
        connect=settings.provider_connect_timeout_seconds,
        read=settings.provider_read_timeout_seconds,
        keepalive=settings.provider_keepalive_seconds,
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
        settings.invoke_answers_ahead,
        settings.invoke_store_wait_seconds,
    ), adapters
