"""The evaluation's pure parts: the embedding check's verifier, which of a case's request
parameters are optional features, a case failed for refusing one, and the suite's requests
sent without temperature."""

from __future__ import annotations

import math

import pytest

from activities.evaluation_refusals import refused_feature
from activities.suite_mapping import to_chat
from domain.enums import Capability
from domain.suite import Suite
from domain.suite.embedding import EMBEDDING_CASES, embedding_passed, verify_embeddings
from domain.suite.reasons import is_rendered_reason
from providers.errors import ErrorKind, ProviderError

ONE, NEAR, PARAPHRASE = EMBEDDING_CASES


def _good() -> list[list[list[float]]]:
    """Answers that pass: unrelated texts orthogonal, near duplicates almost alike."""
    return [
        [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]],
        [[1.0, 0.0, 0.0], [0.9, 0.1, 0.0], [0.0, 0.0, 1.0]],
        [[0.0, 1.0, 0.0], [0.1, 0.9, 0.0], [1.0, 0.0, 0.0]],
    ]


def test_an_embedding_model_that_answers_as_one_passes() -> None:
    results = verify_embeddings(_good())
    assert [r.case_id for r in results] == [c.case_id for c in EMBEDDING_CASES]
    assert all(r.passed for r in results) and embedding_passed(results)


@pytest.mark.parametrize(
    ("case", "answer", "reason"),
    [
        (0, [[1.0, 0.0, 0.0]] * 3, "3 vectors for 4 inputs"),
        (0, [[1.0, 0.0, 0.0]] * 3 + [[1.0, 0.0]], "vectors of different widths"),
        (1, [[1.0, 0.0]] * 3, "vectors of 2 dimensions where 3 were expected"),
        (1, [[math.nan, 0.0, 0.0]] + [[1.0, 0.0, 0.0]] * 2, "a value that is not finite"),
        (1, [[0.0, 0.0, 0.0]] + [[1.0, 0.0, 0.0]] * 2, "a vector of zeros"),
        (
            2,
            [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.1, 0.9, 0.0]],
            "the near duplicate is not closer than the unrelated text",
        ),
        (2, None, "no answer"),
        # Finite, yet no angle can be told: products that overflow (inf / inf), a norm that
        # underflows to 0. A comparison of NaN is false, and passed the case.
        (
            2,
            [[1e200, 1e200, 0.0], [1e200, 1e200, 0.0], [1e200, 1e200, 0.0]],
            "the near duplicate is not closer than the unrelated text",
        ),
        (
            2,
            [[1e-200, 0.0, 0.0], [1e-200, 0.0, 0.0], [0.0, 1e-200, 0.0]],
            "the near duplicate is not closer than the unrelated text",
        ),
    ],
)
def test_an_answer_no_index_can_use_fails_its_case(
    case: int, answer: list[list[float]] | None, reason: str
) -> None:
    answers: list[list[list[float]] | None] = list(_good())
    answers[case] = answer
    results = verify_embeddings(answers)
    assert (results[case].passed, results[case].reason) == (False, reason)
    assert [r.passed for i, r in enumerate(results) if i != case] == [True, True]
    assert not embedding_passed(results)


def test_the_cases_that_test_an_optional_feature_name_it() -> None:
    suite = Suite(max_context_tokens=4096)
    features = {c.case_id: c.start().optional_features for c in suite.cases}
    formats = {i for i, f in features.items() if "response_format" in f}
    parallel = {i for i, f in features.items() if "parallel_tool_calls" in f}
    assert formats and all(
        suite.case(i).capability
        in {Capability.JSON_SCHEMA, Capability.STRICT_JSON, Capability.PLANNING}
        for i in formats
    )
    assert parallel
    assert any(not f for f in features.values())  # plain requests too

    refused = ProviderError(
        ErrorKind.INVALID_REQUEST,
        provider="openai",
        status_code=400,
        reason="Invalid parameter: 'response_format' of type 'json_schema' is not supported",
    )
    # Naming no feature of the request: the plain request's refusal, which ends the run (a
    # schema a strict mode rejects, a tool converted wrongly: ours, not the capability's).
    unnamed = ProviderError(
        ErrorKind.INVALID_REQUEST,
        provider="anthropic",
        status_code=400,
        reason="tools.0.input_schema: JSON schema is invalid",
    )
    filtered = ProviderError(ErrorKind.CONTENT_POLICY, provider="openai", status_code=400)
    with_format = suite.case(sorted(formats)[0]).start()
    plain = next(suite.case(i).start() for i, f in features.items() if not f)
    assert refused_feature(refused, with_format) == "response_format"
    assert refused_feature(refused, plain) is None
    assert refused_feature(unnamed, with_format) is None
    parallel_case = suite.case(sorted(parallel)[0]).start()
    assert refused_feature(refused, parallel_case) is None  # names a feature it did not ask
    assert refused_feature(filtered, with_format) is None  # about the text, not the request
    result = suite.refused(suite.case(sorted(formats)[0]), "response_format")
    assert not result.passed and is_rendered_reason(result.reason)
    assert result.reason == "the provider refused the request's 'response_format'"


def test_a_request_is_sent_without_temperature_when_asked() -> None:
    request = Suite(max_context_tokens=4096).cases[0].start()
    assert to_chat(request).temperature == 0.0
    assert to_chat(request, temperature=False).temperature is None


def test_reliable_context_cases_leave_a_reasoning_model_room_to_answer() -> None:
    # 64 tokens: OpenAI's reasoning models spent them reasoning and answered nothing.
    for case in Suite().cases_for(Capability.RELIABLE_CONTEXT):
        assert case.start().max_tokens == 1024
