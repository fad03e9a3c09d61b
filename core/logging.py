"""Structured logs: one JSON object per line, carrying the request id, tenant and receipt id.

The request-id middleware opens a per-request context (`request_context`) and code anywhere
below it adds to it with `bind()`. The context is a mutable dict held in a contextvar, so a
value bound in a sync dependency (which runs in a worker thread on a *copy* of the context)
is still seen by the middleware's access line: the copy holds the same dict.

Records carry ids, classes, numbers and paths; never request or response bodies. Callers must
not put content into a message or `extra`; the formatter drops `extra` keys it does not know
rather than risk serialising something large or sensitive.

Kept hand-written rather than `python-json-logger` or `structlog` (issue 18, measured with
`bench/bench_libraries.py`): python-json-logger's formatter is slower (7.2 µs against 4.6 µs a
line) and its defaults are the opposite of this policy (every `extra` key kept, the traceback
written out), so using it would mean overriding the same twenty lines on top of it; structlog's
stdlib bridge is slower still (8.8 µs) and would add a second logging API beside the stdlib one
the SDKs and uvicorn already use. Every
logger's lines, uvicorn's and the SDKs' included, are JSON because `configure_logging` puts this
one handler on the root and takes over uvicorn's own handlers (`tests/test_json_logs.py`).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

_context: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "model_router_log_context", default=None
)

# Fields a record may carry through `extra=` and that the JSON line keeps.
EXTRA_FIELDS = (
    "method",
    "path",
    "status",
    "duration_ms",
    "client",
    "profile",
    "deployment",
    "provider",
    "outcome",
    "reason",
    "error_class",
)
_CONTEXT_FIELDS = ("request_id", "tenant", "receipt_id")
_HANDLER_NAME = "model-router-json"


@contextlib.contextmanager
def request_context(**values: str) -> Iterator[dict[str, str]]:
    ctx = dict(values)
    token = _context.set(ctx)
    try:
        yield ctx
    finally:
        _context.reset(token)


def bind(**values: str | None) -> None:
    """Adds ids to the current request's log context (no-op outside a request)."""
    ctx = _context.get()
    if ctx is not None:
        ctx.update({k: v for k, v in values.items() if v})


def current() -> dict[str, str]:
    return dict(_context.get() or {})


def _message(record: logging.LogRecord) -> str:
    """The record's message; asyncio's to its first line, up to the first repr. Its default
    handler puts the object in the message itself, not in `exc_info`: "Task exception was never
    retrieved\nfuture: <Task … exception=ValueError('…')>" carried the exception's text, which
    may quote content, past the rule that an exception is named by its type alone."""
    message = record.getMessage()
    if record.name != "asyncio":
        return message
    first = message.split("\n", 1)[0]
    cut = min((i for i in (first.find("<"), first.find("(")) if i >= 0), default=len(first))
    return first[:cut].rstrip()


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": _message(record),
        }
        line.update(current())
        for name in (*_CONTEXT_FIELDS, *EXTRA_FIELDS):
            value = record.__dict__.get(name)
            if value is not None:
                line[name] = value
        if record.exc_info and record.exc_info[0] is not None:
            # The type only: exception messages and tracebacks can quote request content.
            line["exception"] = record.exc_info[0].__name__
        return json.dumps(line, ensure_ascii=False, default=str)


class PlainFormatter(logging.Formatter):
    """`MODEL_ROUTER_LOG_JSON=false`'s lines, with the JSON lines' rule for exceptions: the
    type only. The standard formatter wrote the traceback and its message (Temporal logs a
    failed activity with its exception, uvicorn an unhandled one), which may quote content."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def formatException(self, ei: Any) -> str:
        return f"exception: {ei[0].__name__}" if ei and ei[0] is not None else ""

    def formatStack(self, stack_info: str) -> str:
        return ""

    def format(self, record: logging.LogRecord) -> str:
        record.exc_text = None  # another handler's formatter may have cached the traceback
        if record.name == "asyncio":  # a copy: other handlers see the record as it was
            record = logging.makeLogRecord({**record.__dict__, "msg": _message(record)})
            record.args = None
        return super().format(record)


_OWN_HANDLERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")
_CHATTY = ("httpx", "httpx2")


def configure_logging(level: str = "INFO", *, json_lines: bool = True) -> None:
    """Installs one stderr handler on the root logger (idempotent: replaces its own, and a
    plain one another library put there)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        # Ours from an earlier call, and a plain one `logging.basicConfig` put there: the
        # anthropic and openai SDKs call it as they are imported (before this runs) when
        # ANTHROPIC_LOG or OPENAI_LOG is set, and its standard formatter wrote every line a
        # second time, tracebacks and exception messages included.
        if handler.get_name() == _HANDLER_NAME or type(handler) is logging.StreamHandler:
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_HANDLER_NAME)
    if json_lines:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(PlainFormatter())
    root.addHandler(handler)
    root.setLevel(level)
    # uvicorn installs its own plain-text handlers on its loggers before it loads the app;
    # take them over so that its lines (start, shutdown, errors) are JSON like every other.
    for name in _OWN_HANDLERS:
        taken = logging.getLogger(name)
        for own in list(taken.handlers):
            taken.removeHandler(own)
        taken.propagate = True
    # warnings.warn() would otherwise print plain text to stderr.
    logging.captureWarnings(True)
    # The HTTP client under the provider SDKs logs every request at INFO ("HTTP Request: POST
    # …"): a JSON line per provider call that the receipt and the access log already cover,
    # 0.6% of the API's CPU at c=16 (bench/profile_invoke.py). Kept when debugging.
    quiet = logging.WARNING if root.getEffectiveLevel() > logging.DEBUG else logging.NOTSET
    for name in _CHATTY:
        logging.getLogger(name).setLevel(quiet)
