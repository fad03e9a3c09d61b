"""The Temporal data converter (core/payload_converter.py): what the SDK makes per activation
shares one JSON converter, and the payloads are byte for byte the pydantic converter's."""

from __future__ import annotations

import dataclasses
import uuid
from decimal import Decimal

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import WorkflowSerializationContext

from core.payload_converter import data_converter
from domain.enums import InvocationOutcome, UsageStatus
from domain.invocation import InvocationSummary


def _summary() -> InvocationSummary:
    return InvocationSummary(
        invocation_id=uuid.uuid4(),
        outcome=InvocationOutcome.COMPLETED,
        usage_status=UsageStatus.REPORTED,
        deployment_id="sim/openai",
        input_tokens=12,
        output_tokens=34,
        estimated_cost_usd=Decimal("0.000123"),
        latency_ms=7,
    )


def test_converters_made_per_activation_share_one_json_converter() -> None:
    # As the SDK's worker does for each activation (_CommandAwareDataConverter.create): a new
    # data converter of the same class, and one with a workflow's serialization context.
    context = WorkflowSerializationContext(namespace="default", workflow_id="w")
    made = [dataclasses.replace(data_converter) for _ in range(3)]
    made.append(data_converter.with_context(context))
    assert {id(_json_of(dc)) for dc in made} == {id(_json_of(data_converter))}


def _json_of(dc: object) -> object:
    inner = dc.payload_converter._inner_payload_converter  # type: ignore[attr-defined]
    return inner.converters[b"json/plain"]


def test_its_payloads_are_the_pydantic_converters_and_read_back() -> None:
    summary = _summary()
    ours = data_converter.payload_converter.to_payloads([summary])
    theirs = pydantic_data_converter.payload_converter.to_payloads([summary])
    assert ours == theirs
    (back,) = data_converter.payload_converter.from_payloads(theirs, [InvocationSummary])
    assert back == summary
