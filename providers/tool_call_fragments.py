"""Chat Completions tool-call fragments as a stream of calls numbered from 0, each call's id
and name said once. OpenAI-compatible servers differ in how they number and head them:

- some omit the index: a new id starts a call, fragments without one continue the latest;
- some repeat the id and name on every fragment, or number calls from 1: passed on, the
  openai SDK's stream helper joined the repeats ("get_weatherget_weather") and raised
  IndexError on a first call numbered 1;
- some send every parallel call at index 0, each with its own id (Ollama, Dynamo): a new id at
  an index already in use starts a call, or the second call's arguments were appended to the
  first's.
"""

from __future__ import annotations

from typing import Any

from providers.types import ToolCallDelta, minted_call_id


class CallNumbering:
    """One stream's tool calls; `delta` turns one fragment into our ToolCallDelta."""

    __slots__ = ("_by_id", "_current", "_id_of", "_titled")

    def __init__(self) -> None:
        self._by_id: dict[str, int] = {}  # a call's id → our index
        self._current: dict[object, int] = {}  # the server's index → our call it continues
        self._id_of: dict[int, str] = {}  # our index → the id said for it
        self._titled: set[int] = set()  # our calls whose name was said

    def delta(self, call: dict[str, Any]) -> ToolCallDelta:
        server_index, call_id = call.get("index"), call.get("id") or None
        said: str | None = None
        if call_id is not None and call_id in self._by_id:
            ours = self._by_id[call_id]  # its id again: the same call
        elif call_id is None and server_index in self._current:
            ours = self._current[server_index]  # a fragment continuing the call at its index
        else:  # a new id, or an index not seen before: a new call, its id said now
            ours = len(self._id_of)
            said = self._id_of[ours] = call_id or minted_call_id()
            if call_id is not None:
                self._by_id[call_id] = ours
        self._current[server_index] = ours
        fn = call.get("function") or {}
        name = fn.get("name") or None
        if name is not None and ours in self._titled:
            name = None
        elif name is not None:
            self._titled.add(ours)
        return ToolCallDelta(
            index=ours, id=said, name=name, arguments_delta=fn.get("arguments") or ""
        )
