"""Whether the gateway holds a call's answer until it is complete (issue 20).

A held answer reaches the caller only once the provider's stream ended well, so a stream cut,
stalled or garbled mid-way is a failed attempt like any other (retried, fallen back from) and
never Partial. The price is the time to the first byte: the whole generation.

- A caller that takes one whole answer (not a stream) sees nothing before the end anyway: held.
- A streamed chat call is held on a Batch profile (`latencyClass`: the workload does not read
  tokens as they come) and passed through as it arrives on Interactive and Standard ones.
- The caller may say otherwise for its own stream (`X-Model-Router-Buffered: true|false`): the
  choice trades only that caller's own latency against its own failure handling; no other
  party's guarantee depends on it, so it is honoured both ways on every profile.
- Embeddings and reranks have no stream to hold: one result, never Partial.
"""

from __future__ import annotations

from domain.enums import LatencyClass
from domain.invocation import Operation


def holds_answer(
    operation: Operation, *, whole: bool, requested: bool | None, latency_class: LatencyClass
) -> bool:
    """`whole`: the caller takes one answer; `requested`: the caller's header on a stream."""
    if operation is not Operation.CHAT:
        return False
    if whole:
        return True
    if requested is not None:
        return requested
    return latency_class is LatencyClass.BATCH
