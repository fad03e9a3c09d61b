"""JSON output on Anthropic's Messages API, which has no JSON mode of its own and takes a
structured-output schema only in a subset of JSON Schema.

A strict `json_schema` format (and the few others the last paragraph names) goes out as
`output_config.format`, its schema made one Anthropic takes by the SDK's own
`anthropic.transform_schema` (what its `messages.parse` sends), and so does a strict tool's
`input_schema` (`sendable_schema`: strict tool use takes the same subset, and an OpenAI strict
tool's `minimum` or `maxLength` was a 400 after the key was claimed): every object
closed with `additionalProperties: false` (a map's value schema dropped with it), and the
keywords outside what the SDK sends as constraints (`minimum`, `maxLength`, `minItems` above 1,
an unknown string `format`, and `pattern` too) moved into the description, where the model
still reads them. Sent as given, any schema with an open object or an unsupported keyword
was a 400 (invalid_request: the caller blamed, no fallback). Draft 7's `definitions` go as
`$defs`, their `$ref`s pointed there: the transform keeps and closes `$defs` only, and moved a
`definitions` into the description, its refs left pointing at nothing. The answer is passed on as
before: the gateway does not check it against the schema (an evaluation's verifiers check it
against the schema as given).

A `json_object` format (JSON mode: any object) has no schema Anthropic takes: `{"type":
"object"}` is an open object, refused the same way. Anthropic's documented way to a free JSON
object is a tool whose input is the answer: one tool (`json_output`, input_schema
`{"type": "object"}`, not strict) the model must call. `AnswerReader` turns its call back into
what JSON mode answers on OpenAI: the object as the assistant's text, no tool call, finish
`stop`.

With the caller's own tools, forcing the answer tool would keep them from being called. Then
`tool_choice: any` over the caller's tools and the answer tool says what OpenAI's JSON mode
with tools does: call a tool, or answer with a JSON object. Under `tool_choice: none` the
answer tool alone is forced (no caller tool may be called, as asked); under `required` or a
named tool the answer is a tool call, which JSON mode does not shape, so no answer tool is
added.

A `json_schema` format that is not strict (OpenAI's default, which LangChain's
`with_structured_output(method="json_schema")` sends) asks for the same answer tool, the
caller's schema as its `input_schema` as given: a tool that is not strict takes any schema, and
OpenAI honours an open object under `strict: false`, where the transform closed it and dropped
a map's values (`dict[str, float]` could only be answered `{}`). Only a schema whose top level is
an object goes so: Anthropic refuses an `input_schema` of another type, or with `anyOf`,
`oneOf` or `allOf` at its top, and a tool's input is an object whatever its schema. A schema
of another top level keeps `output_config.format` (wrapped in an object instead, the answer
would have to be unwrapped again from every streamed fragment). Under a tool call the caller
forces there is no answer tool, as for JSON mode, and the format goes as
`output_config.format`, as a strict one always does (the Messages surface's is strict:
constrained decoding is what it asks for)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, Iterable, Iterator
from typing import Any

import anthropic

from providers.errors import ErrorKind, ProviderError
from providers.types import (
    Accepted,
    ChatRequest,
    Finish,
    FinishReason,
    KeepAlive,
    ResponseFormat,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
)

ANSWER_TOOL = "json_output"
_ANSWER_DESCRIPTION = (
    "Give your answer with this tool: its input is your whole answer, one JSON object."
)

# Keywords that hold for one JSON type only: under a list of types (`["string", "null"]`, as
# OpenAI's strict schemas make a field nullable) each goes to its own type's branch.
_NUMBER = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_OWN: dict[str, tuple[str, ...]] = {
    "object": (
        "properties",
        "required",
        "additionalProperties",
        "patternProperties",
        "minProperties",
        "maxProperties",
    ),
    "array": ("items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains"),
    "string": ("format", "pattern", "minLength", "maxLength"),
    "number": _NUMBER,
    "integer": _NUMBER,
}
_ALL_OWN = frozenset(k for keys in _OWN.values() for k in keys)


def _escaped(name: str) -> str:
    """A key as a JSON pointer (a `$ref`) writes it."""
    return name.replace("~", "~0").replace("/", "~1")


def _typed(node: Any, at: str, moved: set[str], refs: list[dict[str, Any]]) -> Any:
    """The schema with every list of types made an `anyOf` of one type each: the SDK's
    transform takes one type per schema (a list raised AssertionError inside it). And Draft
    7's `definitions` as `$defs`, the only definitions the transform keeps (and closes): the
    pointers (`at`, as a `$ref` writes them) of the schemas whose `definitions` moved go to
    `moved`, each part with a `$ref` to `refs`, to be pointed at `$defs` once all are known
    (`_moved_ref`)."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "definitions" and "$defs" not in node and isinstance(value, dict):
            # (Beside a `$defs` of its own a schema's `definitions` stays as given: the
            # transform moves it into the description, its refs left unresolved.)
            moved.add(at)
            out["$defs"] = {
                name: _typed(sub, f"{at}/{key}/{_escaped(name)}", moved, refs)
                for name, sub in value.items()
            }
        elif key in ("properties", "$defs") and isinstance(value, dict):
            out[key] = {
                name: _typed(sub, f"{at}/{key}/{_escaped(name)}", moved, refs)
                for name, sub in value.items()
            }
        elif key in ("anyOf", "oneOf", "allOf") and isinstance(value, list):
            out[key] = [_typed(sub, f"{at}/{key}/{i}", moved, refs) for i, sub in enumerate(value)]
        elif key == "items":
            out[key] = _typed(value, f"{at}/{key}", moved, refs)
        else:
            out[key] = value
    out = _one_type(out)
    if isinstance(out.get("$ref"), str):
        refs.append(out)
    return out


def _one_type(node: dict[str, Any]) -> dict[str, Any]:
    """`node` with its list of types, if any, made an `anyOf` of one type each, every keyword
    that holds for one type only in its type's branch."""
    types = node.get("type")
    if not isinstance(types, list) or {"enum", "const", "anyOf", "oneOf", "allOf"} & node.keys():
        return node
    if len(types) == 1:
        return {**node, "type": types[0]}
    rest = {k: v for k, v in node.items() if k != "type" and k not in _ALL_OWN}
    branches = [
        {"type": t, **{k: node[k] for k in _OWN.get(str(t), ()) if k in node}} for t in types
    ]
    return {**rest, "anyOf": branches}


def _moved_ref(ref: str, moved: set[str]) -> str:
    """`ref` pointed at `$defs` where it went through `definitions` that `_typed` moved there
    (`#/definitions/A` -> `#/$defs/A`, in a nested schema's too). Any other `definitions` in
    the pointer is a property's name, or beside a `$defs`, and stays."""
    if not ref.startswith("#/"):
        return ref
    parts = ref[2:].split("/")
    at = ""
    for i, part in enumerate(parts):
        if part == "definitions" and at in moved:
            parts[i] = "$defs"
        at += f"/{part}"
    return "#/" + "/".join(parts)


def _sendable(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` as the SDK's transform takes it (`_typed`), its refs pointed where its
    definitions went."""
    moved: set[str] = set()
    refs: list[dict[str, Any]] = []
    typed: dict[str, Any] = _typed(schema, "", moved, refs)
    for holder in refs:
        holder["$ref"] = _moved_ref(holder["$ref"], moved)
    return typed


def sendable_schema(schema: dict[str, Any], provider: str, what: str) -> dict[str, Any]:
    """`schema` as Anthropic's structured outputs and strict tools take it (the module says
    how). A schema the transform cannot read (a part without a type, a `true` schema) is the
    caller's request that no Anthropic deployment takes: refused as invalid, in our words
    (never the schema's), `what` naming the schema."""
    try:
        return anthropic.transform_schema(_sendable(schema))
    except (ValueError, TypeError, AssertionError, RecursionError):
        raise ProviderError(
            ErrorKind.INVALID_REQUEST,
            provider=provider,
            reason=f"{what} has a part without a type, which Anthropic's structured outputs "
            "do not take (each part needs a type, anyOf, allOf, enum or const)",
        ) from None


def _described(fmt: ResponseFormat) -> dict[str, Any]:
    """A json_schema format's schema carrying the format's description: neither Messages'
    format nor the answer tool's schema has a description of its own."""
    schema: dict[str, Any] = fmt.json_schema or {}
    if fmt.description and "description" not in schema:
        schema = {**schema, "description": fmt.description}
    return schema


def output_format(fmt: ResponseFormat, provider: str) -> dict[str, Any]:
    """`output_config.format` for a json_schema format, as Anthropic takes it."""
    # The surfaces name the field differently (response_format, text.format,
    # output_config.format): said as what it is.
    sendable = sendable_schema(_described(fmt), provider, "the output format's JSON schema")
    return {"type": "json_schema", "schema": sendable}


# A tool's input_schema with one of these at its top is refused by Anthropic.
_TOP_COMBINERS = frozenset(("anyOf", "oneOf", "allOf"))


def _by_tool(fmt: ResponseFormat) -> bool:
    """Whether `fmt` is answered with the answer tool: JSON mode, or a json_schema that is not
    strict and whose top level a tool's input_schema can be (the module says why)."""
    if fmt.type == "json_object":
        return True
    schema = fmt.json_schema
    return (
        fmt.type == "json_schema"
        and not fmt.strict
        and schema is not None
        and schema.get("type") == "object"
        and not _TOP_COMBINERS & schema.keys()
    )


def answer_tool(request: ChatRequest) -> str | None:
    """The name of the tool that carries a JSON answer in this request's call, or None when
    the call has none (no json_object format or json_schema answered so, or a tool call forced
    by the caller). Never one of the caller's tools' names."""
    fmt = request.response_format
    if fmt is None or not _by_tool(fmt):
        return None
    choice = request.tool_choice
    if request.tools and choice is not None and choice.mode in ("required", "tool"):
        return None
    names = {t.name for t in request.tools}
    name, n = ANSWER_TOOL, 1
    while name in names:
        name, n = f"{ANSWER_TOOL}_{n}", n + 1
    return name


def ask_for_answer(request: ChatRequest, params: dict[str, Any], name: str) -> None:
    """Adds the answer tool to `params` (after the caller's tools, so their cache prefix
    stays) and the tool choice that has the model answer with it (the module says why)."""
    fmt = request.response_format
    # JSON mode's any object, or the caller's schema as given (a tool that is not strict takes
    # any schema; never the transform's, which closes every object).
    schema = (
        _described(fmt) if fmt is not None and fmt.type == "json_schema" else {"type": "object"}
    )
    tool = {"name": name, "description": _ANSWER_DESCRIPTION, "input_schema": schema}
    params["tools"] = [*params.get("tools", ()), tool]
    choice = request.tool_choice
    if request.tools and (choice is None or choice.mode == "auto"):
        tool_choice: dict[str, Any] = {"type": "any"}
        if request.parallel_tool_calls is False:
            tool_choice["disable_parallel_tool_use"] = True
    else:
        # One answer: two calls of the answer tool would be two objects, no JSON text.
        tool_choice = {"type": "tool", "name": name, "disable_parallel_tool_use": True}
    params["tool_choice"] = tool_choice


def _as_said(arguments: str) -> str:
    """A whole message's answer as its stream says it: the adapter writes a tool_use's parsed
    input out again as ASCII (`\\u00fc`), where the stream's fragments carry the characters
    (`ü`). Kept escaped where a character is half a surrogate pair, which no text carries."""
    try:
        text = json.dumps(json.loads(arguments), ensure_ascii=False, separators=(",", ":"))
        text.encode()
    except ValueError:  # UnicodeEncodeError among them
        return arguments
    return text


class AnswerReader:
    """The answer tool's call read back as the answer's text, on the stream's events and on a
    whole message's alike (so both fold to one answer): its argument fragments become text
    fragments, its head nothing; the caller's calls keep their order, numbered past it; a
    `tool_use` stop with no call of the caller's is `stop`. Only the first call of the answer
    tool is the answer; a later one (`tool_choice: any` with the caller's tools cannot keep the
    model from calling it twice) is dropped, its events with it: passed on, it was a call of a
    tool the caller never declared, and its finish `tool_calls` asked the caller to run it.
    Its object is not joined to the answer either, as two objects are no JSON text.

    A call whose input streamed no fragment is the empty object, as the whole message's
    `input: {}` reads: said where its block ends (at the next event that is not a keep-alive).
    `whole`:
    the events are a whole message's, whose input the adapter wrote out again (`_as_said`)."""

    def __init__(self, name: str | None, *, whole: bool = False) -> None:
        self._name = name
        self._whole = whole
        self._index: int | None = None  # the answer's call, as the adapter numbered it
        self._said = False
        self._calls: dict[int, int] = {}  # the caller's calls: adapter's index -> ours
        self._dropped: set[int] = set()  # the answer tool's later calls, as the adapter numbered

    def read(self, event: StreamEvent) -> tuple[StreamEvent, ...]:
        if self._name is None or isinstance(event, Accepted | KeepAlive):
            return (event,)
        if isinstance(event, ToolCallDelta) and (
            event.index == self._index
            or (self._index is None and event.index not in self._calls and event.name == self._name)
        ):
            self._index = event.index
            if not event.arguments_delta:
                return ()
            self._said = True
            text = _as_said(event.arguments_delta) if self._whole else event.arguments_delta
            return (TextDelta(text=text),)
        out: list[StreamEvent] = []
        if self._index is not None and not self._said:
            # The answer's block is over and said nothing: `{}`, where the whole message has it.
            self._said = True
            out.append(TextDelta(text="{}"))
        if isinstance(event, ToolCallDelta):
            if event.index in self._dropped or (
                event.index not in self._calls and event.name == self._name
            ):
                # Another call of the answer tool (never a caller's: the name is none of
                # theirs): dropped, not numbered among the caller's calls.
                self._dropped.add(event.index)
                return tuple(out)
            index = self._calls.setdefault(event.index, len(self._calls))
            if index != event.index:
                event = event.model_copy(update={"index": index})
        elif isinstance(event, Finish) and event.reason is FinishReason.TOOL_CALLS:
            if self._index is not None and not self._calls:
                event = event.model_copy(update={"reason": FinishReason.STOP})
        out.append(event)
        return tuple(out)


async def read_answers(
    events: AsyncGenerator[StreamEvent, None], name: str
) -> AsyncGenerator[StreamEvent, None]:
    """A stream's events through an `AnswerReader` for answer tool `name`."""
    reader = AnswerReader(name)
    # Closed with this generator, so closing it early still closes the HTTP response.
    async with contextlib.aclosing(events):
        async for event in events:
            for out in reader.read(event):
                yield out


def read_whole(events: Iterable[StreamEvent], name: str | None) -> Iterator[StreamEvent]:
    """A whole message's events through an `AnswerReader`, as its stream's are read."""
    reader = AnswerReader(name, whole=True)
    for event in events:
        yield from reader.read(event)
