"""The embedding check: the evidence an embedding model needs before it can be approved.

None of the 13 capabilities applies to an embedding model (they are properties of chat
answers), and its server refuses chat (OpenAI: a 404, "not a chat model"), so a deployment
listed only by Embedding profiles is evaluated with these cases instead of the suite's, through
the embeddings endpoint. Each case embeds a few fixed texts; the verifier is deterministic:
one vector per input, every vector of the check as wide as the others (a profile declares no
width: `embeddingCompatibility` names a space, not its width), no value that is not finite,
no vector of zeros, and, where the case says so, a near duplicate of a text closer to it (by
cosine) than an unrelated text is. The evidence is recorded (Candidate → Evaluated, with no
capability scores) only when every case passes, as the rerank check's; an Embedding profile
should therefore require no capabilities.

The case texts are the check's own fixed texts, never a caller's content; results hold ids
and reasons only, never a vector.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from domain.suite.checks import CheckResult, all_passed

EMBEDDING_CAPABILITY = "embedding"  # the progress label of these cases (not a scored capability)

Vectors = Sequence[Sequence[float]]


class EmbeddingCase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    case_id: str
    inputs: tuple[str, ...]
    # (anchor, near duplicate, unrelated): indices into `inputs`; the near duplicate must be
    # the closer of the two to the anchor.
    closer: tuple[int, int, int] | None = None


EMBEDDING_CASES: tuple[EmbeddingCase, ...] = (
    EmbeddingCase(
        case_id="embedding-one-per-input",
        inputs=(
            "The invoice is due at the end of the month",
            "Heavy rain is expected in the north tonight",
            "Add two cups of flour and stir gently",
            "The train to the airport leaves every ten minutes",
        ),
    ),
    EmbeddingCase(
        case_id="embedding-near-duplicate",
        inputs=(
            "The quick brown fox jumps over the lazy dog",
            "The quick brown fox jumped over the lazy dog",
            "Quarterly revenue grew by four percent in Europe",
        ),
        closer=(0, 1, 2),
    ),
    EmbeddingCase(
        case_id="embedding-paraphrase",
        inputs=(
            "How do I reset my password?",
            "How can I reset my password?",
            "The museum opens at nine on Sundays",
        ),
        closer=(0, 1, 2),
    ),
)


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """NaN where it cannot be told: a norm that underflows to 0, or values whose products
    overflow (inf / inf). The check passes only a comparison that is true, never one of NaN."""
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    norms = math.sqrt(math.fsum(x * x for x in a)) * math.sqrt(math.fsum(y * y for y in b))
    if norms == 0 or not math.isfinite(norms) or not math.isfinite(dot):
        return math.nan
    return dot / norms


def verify_embedding(
    case: EmbeddingCase, vectors: Vectors | None, dimensions: int | None
) -> CheckResult:
    """`vectors`: the answer, in the inputs' order (None: the provider gave none);
    `dimensions`: the width every vector of the check must have (None: any one width)."""

    def result(passed: bool, reason: str) -> CheckResult:
        return CheckResult(case_id=case.case_id, passed=passed, reason=reason)

    if vectors is None:
        return result(False, "no answer")
    if len(vectors) != len(case.inputs):
        return result(False, f"{len(vectors)} vectors for {len(case.inputs)} inputs")
    widths = {len(v) for v in vectors}
    if len(widths) != 1:
        return result(False, "vectors of different widths")
    [width] = widths
    if width == 0:
        return result(False, "empty vectors")
    if dimensions is not None and width != dimensions:
        return result(False, f"vectors of {width} dimensions where {dimensions} were expected")
    if not all(math.isfinite(x) for v in vectors for x in v):
        return result(False, "a value that is not finite")
    if any(not any(v) for v in vectors):
        return result(False, "a vector of zeros")
    if case.closer is not None:
        anchor, near, far = (vectors[i] for i in case.closer)
        if not _cosine(anchor, near) > _cosine(anchor, far):
            return result(False, "the near duplicate is not closer than the unrelated text")
    return result(True, "embedded as expected")


def verify_embeddings(answers: Sequence[Vectors | None]) -> list[CheckResult]:
    """Every case's result, `answers` in EMBEDDING_CASES' order. One width holds across the
    check, the first answer's: a model that answers one width here and another there cannot
    fill one index."""
    if len(answers) != len(EMBEDDING_CASES):
        raise ValueError("one answer (or None) per case")
    width = next((len(a[0]) for a in answers if a), None)
    return [verify_embedding(c, a, width) for c, a in zip(EMBEDDING_CASES, answers, strict=True)]


def embedding_passed(results: Sequence[CheckResult]) -> bool:
    """Every case answered and passed (a case without a result counts as failed)."""
    return all_passed(results, (c.case_id for c in EMBEDDING_CASES))
