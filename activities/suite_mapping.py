"""The capability suite's request/answer types to and from the adapters' normalised types."""

from __future__ import annotations

from domain.suite import SuiteAnswer, SuiteRequest, SuiteToolCall
from providers.types import (
    ChatRequest,
    Completion,
    Message,
    ResponseFormat,
    Tool,
    ToolCall,
    ToolChoice,
)


def to_chat(request: SuiteRequest, *, temperature: bool = True) -> ChatRequest:
    """`temperature`: False sends none, for a model that refuses the suite's (the provider's
    default then applies)."""
    system = [Message(role="system", content=request.system)] if request.system else []
    return ChatRequest(
        messages=(
            *system,
            *(
                Message(
                    role=m.role,
                    content=m.content,
                    tool_calls=tuple(
                        ToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in m.tool_calls
                    ),
                    tool_call_id=m.tool_call_id,
                )
                for m in request.messages
            ),
        ),
        tools=tuple(
            Tool(name=t.name, description=t.description, parameters=t.parameters, strict=t.strict)
            for t in request.tools
        ),
        tool_choice=(
            ToolChoice(mode=request.tool_choice.mode, name=request.tool_choice.name)
            if request.tool_choice
            else None
        ),
        parallel_tool_calls=request.parallel_tool_calls,
        response_format=(
            ResponseFormat(**request.response_format.model_dump())
            if request.response_format
            else None
        ),
        max_tokens=request.max_tokens,
        temperature=request.temperature if temperature else None,
    )


def to_answer(completion: Completion) -> SuiteAnswer:
    return SuiteAnswer(
        text=completion.text,
        tool_calls=tuple(
            SuiteToolCall(id=c.id, name=c.name, arguments=c.arguments)
            for c in completion.tool_calls
        ),
        finish_reason=completion.finish_reason.value,
    )
