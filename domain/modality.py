"""Which profile modality each operation needs: a Chat profile answers chat, an Embedding
profile embeddings, a Rerank profile reranking, and nothing else. Checked before routing, so a
call on the wrong kind of profile reaches no adapter and leaves no receipt."""

from __future__ import annotations

from domain.enums import Modality
from domain.invocation import Operation

NEEDS: dict[Operation, Modality] = {
    Operation.CHAT: Modality.CHAT,
    Operation.EMBED: Modality.EMBEDDING,
    Operation.RERANK: Modality.RERANK,
}


def mismatch(modality: Modality, operation: Operation) -> Modality | None:
    """The modality `operation` needs when the profile's is another; None when they agree."""
    needed = NEEDS[operation]
    return None if modality is needed else needed
