"""What an invocation's event stream carries to a surface: the hub's events of the live call
(`activities/invoke_hub.HubEvent`, less `Attach`, which the service consumes) or, for a key
used before, the stored answer (`Replayed`), and always last the receipt (`ReceiptReady`);
and the invocation a request follows through them (`Running`). Plain dataclasses and the
adapters' own event models: nothing is built per chunk to type it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from activities.invoke_hub import Output, PendingCall, ReceiptReady
from providers.types import EmbeddingResult, RerankResult


@dataclass(frozen=True)
class Replayed:
    """The stored output of an invocation that already ran (bytes of the artifact), and the
    deployment its receipt says produced it."""

    output: bytes | None
    deployment_id: str | None = None


InvocationEvent = Output | EmbeddingResult | RerankResult | Replayed | ReceiptReady


@dataclass
class Running:
    """An invocation this request started (events arrive live) or attached to (replayed)."""

    invocation_id: uuid.UUID
    deployment_id: str
    events: AsyncIterator[InvocationEvent]
    # The deployments it may be answered by, in route order (empty for a replay).
    candidates: tuple[str, ...] = ()
    # The live call's hub entry: it names the deployment whose events are arriving.
    pending: PendingCall | None = None
    # The key's earlier call, replayed (or waited for): its answer is the key's for good.
    replay: bool = False

    def answering(self, first: InvocationEvent) -> str | None:
        """The deployment that produced `first` (the first item of `events`), as the receipt
        will name it; None until output or the receipt says (the first target is only a
        plan, and a fallback may answer instead)."""
        if isinstance(first, ReceiptReady):
            return first.summary.deployment_id
        if isinstance(first, Replayed):
            return first.deployment_id
        return self.pending.answering if self.pending is not None else None
