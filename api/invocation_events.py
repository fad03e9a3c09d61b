"""What an invocation's event stream carries to a surface: the hub's events of the live call
(`activities/invoke_hub.HubEvent`, less `Attach`, which the service consumes) or, for a key
used before, the stored answer (`Replayed`), and always last the receipt (`ReceiptReady`).
Plain dataclasses and the adapters' own event models: nothing is built per chunk to type it."""

from __future__ import annotations

from dataclasses import dataclass

from activities.invoke_hub import Output, ReceiptReady
from providers.types import EmbeddingResult, RerankResult


@dataclass(frozen=True)
class Replayed:
    """The stored output of an invocation that already ran (bytes of the artifact), and the
    deployment its receipt says produced it."""

    output: bytes | None
    deployment_id: str | None = None


InvocationEvent = Output | EmbeddingResult | RerankResult | Replayed | ReceiptReady
