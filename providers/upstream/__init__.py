"""Local upstream SIMULATOR: a stand-in for model providers, speaking the OpenAI
(chat completions, embeddings, models) and Anthropic (messages) wire protocols plus rerank,
with scripted answers per model, injected faults and request counters.

Tests and `make dev` point the real SDKs at it. It never logs request or response bodies.
"""

from providers.upstream.app import create_app
from providers.upstream.faults import Fault, FaultKind
from providers.upstream.responders import (
    Responder,
    ScriptedResponder,
    default_responder,
    fixed,
)
from providers.upstream.schema_fill import instance_for
from providers.upstream.server import UpstreamServer
from providers.upstream.state import ModelSettings, RequestRecord, UpstreamState
from providers.upstream.turn import ChatTurn, Reply, ToolCallReply, ToolSpec, TurnMessage

__all__ = [
    "ChatTurn",
    "Fault",
    "FaultKind",
    "ModelSettings",
    "Reply",
    "RequestRecord",
    "Responder",
    "ScriptedResponder",
    "ToolCallReply",
    "ToolSpec",
    "TurnMessage",
    "UpstreamServer",
    "UpstreamState",
    "create_app",
    "default_responder",
    "fixed",
    "instance_for",
]
