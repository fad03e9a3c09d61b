"""Data read back from a Temporal history, as a validator sees it: the context the data
converter (`core/payload_converter.py`) validates every payload with, and the predicate an
edge rule asks.

A value that crosses the workflow boundary (a workflow's input, an activity's input or result,
an update's argument) is recorded in a history and validated again on every replay, by
whatever code the worker runs then. A rule tightened after the value was recorded would refuse
it there: the SDK makes that a workflow-task failure retried for ever, the workflow stays
Running and answers nothing (7b798e6's deploymentId path rule did this to a lifecycle
registered as "team/x/": it could not even be retired).

So the rules are of two kinds. A structural one (a tool message has its call id, weights sum
to 1) is one the code relies on, and holds wherever the value comes from. An *edge* rule
narrows what a caller may send (an id's shape, no credential in an endpointRef, a result
reason that is a template): it is checked where the value enters (the API's request bodies,
which FastAPI validates with no context, and the code that builds the value), and skips data
read back from a history, which was let in by the rules of its day:

    @field_validator("deployment_id")
    @classmethod
    def _rule(cls, value: str, info: ValidationInfo) -> str:
        if not reading_stored(info) and not ok(value):
            raise ValueError(...)
        return value

An edge rule added to a type that crosses the workflow boundary must be written this way. A
`Field` constraint (pattern, max_length) cannot read the context: tighten one as such a
validator, never by narrowing the constraint.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import ValidationInfo

STORED = "stored"


def stored_context() -> dict[str, bool]:
    """The context of a value read back from a history (a new dict: a validator may keep it)."""
    return {STORED: True}


def reading_stored(info: ValidationInfo) -> bool:
    """Whether the value being validated was read back from a history."""
    context = info.context
    return isinstance(context, Mapping) and context.get(STORED) is True
