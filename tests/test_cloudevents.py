"""The CloudEvents envelope (domain/cloudevents.py): its `sequence` orders as text the way its
events are ordered."""

from __future__ import annotations

from datetime import UTC, datetime

from domain.cloudevents import OutboxEvent, to_cloudevent


def _event(position: int) -> OutboxEvent:
    return OutboxEvent(
        position=position,
        event_id=f"e{position}",
        tenant_id="t",
        event_type="DeploymentStateChanged",
        topic="model-access.deployments.v1.deployment-state-changed",
        aggregate_type="ModelDeployment",
        aggregate_id="a/b",
        payload={},
        occurred_at=datetime.now(UTC),
    )


def test_sequences_compare_as_text_in_the_order_of_their_positions() -> None:
    """The sequence extension is compared as a string: written plainly, event 10 came before
    event 9. Across every change in digit count up to a BIGINT's largest value, text order is
    position order, and the number still reads back."""
    positions = [0, 1, 9, 10, 99, 100, 2**31, 2**32, 10**18 - 1, 10**18, 2**63 - 1]
    sequences = [to_cloudevent(_event(p))["sequence"] for p in positions]
    assert to_cloudevent(_event(9))["sequence"] < to_cloudevent(_event(10))["sequence"]
    assert sorted(sequences) == sequences
    assert [int(s) for s in sequences] == positions
    assert {len(s) for s in sequences} == {19}
