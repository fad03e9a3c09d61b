"""Every line an API process writes is JSON — uvicorn's own start, request and shutdown lines
included — when it runs as `make dev` and the image run it (uvicorn with the app factory)."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from dataclasses import dataclass

import httpx
import pytest

from core.logging import configure_logging
from core.settings import Settings
from core.temporal import core_logs
from core.temporal_logs import ExpectedCoreWarnings
from tests.conftest import free_port
from tests.helpers.deadline import eventually
from tests.helpers.process import Proc


async def test_every_line_of_the_api_process_is_json(settings: Settings) -> None:
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MODEL_ROUTER_")},
        "MODEL_ROUTER_ENVIRONMENT": "test",
        "MODEL_ROUTER_DATABASE_URL": settings.database_url,
        "MODEL_ROUTER_TEMPORAL_ADDRESS": settings.temporal_address,
        "MODEL_ROUTER_AUTH_JWT_SECRET": "x" * 40,
        "MODEL_ROUTER_ARTIFACT_ROOT": str(settings.artifact_root),
        # An operator debugging the SDKs: each puts a plain handler on the root logger as it is
        # imported (logging.basicConfig), which wrote every line again, tracebacks included.
        "ANTHROPIC_LOG": "info",
        "OPENAI_LOG": "info",
    }
    # As cli/dev.py starts it (access log on here, to have uvicorn's request lines too).
    argv = [sys.executable, "-m", "uvicorn", "--factory", "api.app:create_app"]
    proc = Proc([*argv, "--host", "127.0.0.1", "--port", str(port)], env=env)
    try:

        async def up() -> bool:
            try:
                async with httpx.AsyncClient() as c:
                    return (await c.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200
            except httpx.TransportError:
                return False

        await eventually(up, timeout=30, interval=0.1)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
            assert (await c.get("/factory/model-profiles")).status_code == 401
            assert (await c.get("/no-such-path")).status_code == 404
            await c.post("/oauth/token", content=b"\xff\xfe", headers={"Content-Type": "x"})
    finally:
        proc.proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
    assert code == 0, proc.output
    lines = [line for line in proc.lines if line.strip()]
    plain = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            plain.append(line)
            continue
        assert {"ts", "level", "logger", "message"} <= set(record), line
    assert plain == [], "\n".join(plain)
    loggers = {json.loads(line)["logger"] for line in lines}
    # uvicorn's own lines are among them, as JSON.
    assert "uvicorn.error" in loggers and "uvicorn.access" in loggers, loggers
    messages = " ".join(json.loads(line)["message"] for line in lines)
    assert "Started server process" in messages and "Shutting down" in messages


def test_the_http_clients_line_per_provider_call_is_dropped_unless_debugging() -> None:
    root = logging.getLogger()
    saved = root.level, list(root.handlers)
    chatty = [logging.getLogger(name) for name in ("httpx", "httpx2")]
    levels = [logger.level for logger in chatty]
    try:
        configure_logging("INFO")
        # "HTTP Request: POST …" at INFO per provider call: the receipt already says it.
        assert not any(logger.isEnabledFor(logging.INFO) for logger in chatty)
        assert all(logger.isEnabledFor(logging.WARNING) for logger in chatty)
        configure_logging("DEBUG")
        assert all(logger.isEnabledFor(logging.DEBUG) for logger in chatty)
    finally:
        root.handlers[:] = saved[1]
        root.setLevel(saved[0])
        for logger, level in zip(chatty, levels, strict=True):
            logger.setLevel(level)


def test_cores_long_task_warning_is_dropped_for_invocations_only() -> None:
    # As temporalio forwards a Core line (runtime.LogForwardingConfig): the Core entry rides on
    # the record. InvokeModel's first task is open for as long as its call runs, so the warning
    # is expected there; from any other workflow it means a task that held on, and stays.
    @dataclass
    class Entry:
        fields: dict[str, object]

    def record(workflow_type: str, message: str = "Workflow task duration exceeded") -> bool:
        line = logging.getLogger("temporalio.core").makeRecord(
            "temporalio.core-sdk_core::managed_run",
            logging.WARNING,
            "(sdk-core)",
            0,
            f"[TMPRL1104] {message} {{'workflow_type': '{workflow_type}'}}",
            (),
            None,
            extra={"temporal_log": Entry({"workflow_type": workflow_type})},
        )
        return ExpectedCoreWarnings().filter(line)

    root = logging.getLogger()
    saved = root.level
    try:
        root.setLevel(logging.INFO)
        assert record("InvokeModel") is False
        assert record("DeploymentLifecycle") is True
        root.setLevel(logging.DEBUG)
        assert record("InvokeModel") is True
    finally:
        root.setLevel(saved)
    # And the logger Core's lines are forwarded to carries the filter.
    assert any(isinstance(f, ExpectedCoreWarnings) for f in core_logs().filters)


def test_plain_lines_name_an_exception_by_its_type_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`MODEL_ROUTER_LOG_JSON=false` is allowed in production: its lines keep the JSON lines'
    rule, an exception's type and never its message or traceback, which may quote content."""
    root = logging.getLogger()
    saved = root.level, list(root.handlers)
    try:
        configure_logging("INFO", json_lines=False)
        try:
            raise ValueError("input_value='the launch code is 0000-PLUTO'")
        except ValueError:
            logging.getLogger("temporalio.activity").warning(
                "Completing activity as failed", exc_info=True
            )
        logging.getLogger("probe").warning("stack", stack_info=True)
    finally:
        root.handlers[:] = saved[1]
        root.setLevel(saved[0])
    written = capsys.readouterr().err
    assert "Completing activity as failed" in written and "exception: ValueError" in written
    assert "PLUTO" not in written and "Traceback" not in written and "Stack (most" not in written


def test_asyncio_lines_carry_no_objects_text(capsys: pytest.CaptureFixture[str]) -> None:
    """asyncio's default handler writes the task, and its exception's text, into the message
    itself ("Task exception was never retrieved\nfuture: <Task … exception=…('…')>"): the
    line keeps the first words, never the objects."""
    root = logging.getLogger()
    saved = root.level, list(root.handlers)
    exc = ValueError("input_value='the launch code is 0000-PLUTO'")
    try:
        for json_lines in (True, False):
            configure_logging("INFO", json_lines=json_lines)
            logging.getLogger("asyncio").error(
                "Task exception was never retrieved\nfuture: <Task finished exception=%r>",
                exc,
                exc_info=(ValueError, exc, None),
            )
            logging.getLogger("asyncio").error("Exception in callback f(%r)", str(exc))
    finally:
        root.handlers[:] = saved[1]
        root.setLevel(saved[0])
    written = capsys.readouterr().err
    assert "PLUTO" not in written
    assert written.count("Task exception was never retrieved") == 2
    assert written.count("Exception in callback f") == 2
