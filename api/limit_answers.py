"""The answers the limits middleware (api/limits.py) writes itself, below the app: a problem
in the path's own envelope (problem+json, or a surface's: OpenAI's, Anthropic's), a body too
large, and a string that is not text met at the request's hash, naming its field."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import Scope, Send

from api.problems import VALIDATION, Problem, envelope_for
from domain.text import not_text

PROBLEM_JSON = b"application/problem+json"


async def problem_of(scope: Scope, send: Send, problem: Problem) -> None:
    await problem_answer(
        scope,
        send,
        problem.status,
        problem.title,
        problem.detail,
        headers=[(k.lower().encode(), v.encode()) for k, v in problem.headers.items()],
        type_=problem.type,
        **problem.extensions,
    )


async def not_text_answer(scope: Scope, send: Send, body: bytes, message: str) -> None:
    """A request holding a string that is not text, which its route met at the request's hash:
    refused as the request's own checks refuse one (api/text_bodies.py), naming the body's
    field: a 422, or a 400 on a surface with an envelope of its own (OpenAI's, Anthropic's),
    as those refuse what they cannot take (api/problems.py)."""
    field = not_text_field(body)
    own = envelope_for(scope.get("app"), scope.get("path", "")) is not None
    status, title = (400, "Bad Request") if own else (422, "Unprocessable Content")
    await problem_answer(
        scope,
        send,
        status,
        title,
        f"Invalid request: {field}",
        type_=VALIDATION,
        errors=[{"field": field, "message": message}],
    )


def not_text_field(body: bytes) -> str:
    """`body.<where>` of the body's first string that is not text; `body` when the body shows
    none (the string was not sent as it is: the hash is taken over the request as the route
    read it)."""
    try:
        where = not_text(json.loads(body)) if body else None
    except (ValueError, RecursionError):
        where = None  # not JSON (a form)
    return ".".join(str(part) for part in ("body", *(where or ())))


async def too_large(scope: Scope, send: Send, limit: int) -> None:
    await problem_answer(
        scope,
        send,
        413,
        "Content Too Large",
        f"The request body exceeds {limit} bytes.",
        maxBytes=limit,
    )


async def problem_answer(
    scope: Scope,
    send: Send,
    status: int,
    title: str,
    detail: str,
    *,
    headers: list[tuple[bytes, bytes]] | None = None,
    type_: str = "about:blank",
    **extensions: Any,
) -> None:
    problem: dict[str, Any] = {
        "type": type_,
        "title": title,
        "status": status,
        "detail": detail,
        "instance": scope.get("path", ""),
    }
    request_id = scope.get("state", {}).get("request_id")
    if request_id:
        problem["requestId"] = request_id
    problem.update(extensions)
    content_type = PROBLEM_JSON
    # A surface with its own error envelope (Messages, Responses) gets these refusals in it too.
    render = envelope_for(scope.get("app"), scope.get("path", ""))
    if render is not None:
        problem, more = render(status, problem)
        content_type = more.pop("content-type", "application/json").encode()
        headers = [*(headers or []), *((k.encode(), v.encode()) for k, v in more.items())]
    payload = json.dumps(problem).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(payload)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
