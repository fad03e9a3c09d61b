"""The CloudEvents envelope (domain/cloudevents.py): its `sequence` orders as text the way its
events are ordered."""

from __future__ import annotations

from domain.cloudevents import to_cloudevent
from tests.helpers.outbox_events import state_changed


def test_sequences_compare_as_text_in_the_order_of_their_positions() -> None:
    """The sequence extension is compared as a string: written plainly, event 10 came before
    event 9. Across every change in digit count up to a BIGINT's largest value, text order is
    position order, and the number still reads back."""
    positions = [0, 1, 9, 10, 99, 100, 2**31, 2**32, 10**18 - 1, 10**18, 2**63 - 1]
    sequences = [to_cloudevent(state_changed(position=p))["sequence"] for p in positions]
    assert (
        to_cloudevent(state_changed(position=9))["sequence"]
        < to_cloudevent(state_changed(position=10))["sequence"]
    )
    assert sorted(sequences) == sequences
    assert [int(s) for s in sequences] == positions
    assert {len(s) for s in sequences} == {19}
