"""The Temporal data converter: the SDK's pydantic JSON conversion, with one JSON converter per
process, that reads every payload back as stored data.

The SDK makes a new payload converter for every workflow activation and completion
(`_CommandAwareDataConverter.create` calls `payload_converter_class()`), and the pydantic one
makes a new JSON converter each time: a fresh schema serializer and an empty cache of type
adapters, so each activation also builds InvokeModel's input type adapter again. In a py-spy
profile of the API at c=1 (800 calls, 2,949 main-thread samples, 2026-12-04) those
constructions were 2.0 % of the main thread; timed alone, a data converter is made in 3.8 µs
instead of 9.3, and the type adapter (3.9 µs) is built once. The JSON converter holds no state
of a workflow's (its cache is keyed by type), so every composite shares it; each composite is
still made anew, as `with_context` expects of a nullary converter class.

Every payload it decodes was recorded in Temporal (a workflow's or an activity's input or
result, an update's argument, a schedule's action) or is a query's answer from such values, and
may be read again by code written after it was recorded. So it validates with
`domain.stored`'s context, which the edge rules of the types crossing the boundary (a
deploymentId's path segments, an endpointRef, a case result's templated reason) read to let
stored data through: a rule tightened since would otherwise refuse a recorded history on
replay, a workflow-task failure retried for ever. An edge rule added to such a type must skip
stored data the same way (`domain/stored.py`). The API's request bodies are validated by
FastAPI, without the context, and keep every rule. Encoding is the SDK's, unchanged.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
)

from domain.stored import stored_context


class StoredJSONPayloadConverter(PydanticJSONPlainPayloadConverter):
    """The SDK's pydantic JSON converter, its payloads validated as stored data."""

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        # The SDK's lookup, with its cache of type adapters; only the context is added. Timed
        # on a LifecycleInput (200,000 decodings, best of 5), the context costs nothing
        # measurable: 3.52 µs without it, 3.49 µs with it.
        hint = type_hint if type_hint is not None else Any
        adapter: TypeAdapter[Any]
        try:
            adapter = self._type_adapter(hint)
        except TypeError:
            # An unhashable hint bypasses the cache; a TypeError building the adapter is raised.
            try:
                hash(hint)
            except TypeError:
                adapter = TypeAdapter(hint)
            else:
                raise
        return adapter.validate_json(payload.data, context=stored_context())


_JSON = StoredJSONPayloadConverter()


class PayloadConverter(CompositePayloadConverter):
    """The SDK's default converters, JSON through pydantic (as `PydanticPayloadConverter`),
    its JSON converter shared."""

    def __init__(self) -> None:
        super().__init__(
            *(
                _JSON if isinstance(c, JSONPlainPayloadConverter) else c
                for c in DefaultPayloadConverter.default_encoding_payload_converters
            )
        )


data_converter = DataConverter(payload_converter_class=PayloadConverter)
