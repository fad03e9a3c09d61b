"""Micro-benchmark behind issue 18 point 7: each hand-written piece against the library that
could replace it (CloudEvents envelope, Standard Webhooks signing, JSON log lines, the token
bucket). Run with a Python that has the candidate libraries installed:
`python bench/bench_libraries.py`; a library that is not installed is reported and skipped.
Numbers are per call, best of five runs."""

from __future__ import annotations

import json
import logging
import secrets
import sys
import time
import timeit
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from domain.cloudevents import OutboxEvent, to_cloudevent


def _per_call_us(fn: Callable[[], object], number: int = 20000) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def _row(name: str, us: float) -> None:
    print(f"{name:<58} {us:8.2f} µs")


def cloudevents_envelope() -> None:
    event = OutboxEvent(
        position=42,
        event_id=str(uuid.uuid4()),
        tenant_id="tenant-a",
        event_type="ModelInvoked",
        topic="connectsoft.factory.model_gateway.model_invoked",
        aggregate_type="Receipt",
        aggregate_id=str(uuid.uuid4()),
        payload={"receiptId": "r-1", "outcome": "Succeeded", "inputTokens": 12},
        occurred_at=datetime.now(UTC),
    )
    _row(
        "cloudevent: hand-written dict + json.dumps",
        _per_call_us(lambda: json.dumps(to_cloudevent(event), separators=(",", ":")).encode()),
    )
    try:
        from cloudevents.core.formats.json import JSONFormat
        from cloudevents.core.v1.event import CloudEvent
    except ImportError:
        print("cloudevents: not installed")
        return
    fmt = JSONFormat()

    def sdk() -> bytes:
        ce = CloudEvent(
            {
                "id": event.event_id,
                "source": "model-router",
                "type": event.topic,
                "subject": event.aggregate_id,
                "time": event.occurred_at,
                "datacontenttype": "application/json",
                "eventname": event.event_type,
                "aggregatetype": event.aggregate_type,
                "sequence": str(event.position),
                "tenantid": event.tenant_id,
            },
            event.payload,
        )
        return fmt.write(ce)

    _row("cloudevent: cloudevents SDK CloudEvent + JSONFormat.write", _per_call_us(sdk))


def webhook_signing() -> None:
    import base64
    import hashlib
    import hmac

    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    body = b'{"specversion":"1.0","id":"e-1","data":{"receiptId":"r-1"}}'
    ts = int(time.time())

    def hand() -> str:
        key = base64.b64decode(secret.removeprefix("whsec_"))
        signed = f"e-1.{ts}.".encode() + body
        return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()

    _row("webhook signature: hand-written HMAC", _per_call_us(hand))
    try:
        from standardwebhooks import Webhook
    except ImportError:
        print("standardwebhooks: not installed")
        return
    at = datetime.fromtimestamp(ts, UTC)
    _row(
        "webhook signature: standardwebhooks Webhook(secret).sign",
        _per_call_us(lambda: Webhook(secret).sign("e-1", at, body.decode())),
    )


def json_logging() -> None:
    from core.logging import JsonFormatter

    record = logging.LogRecord("model_router.api", logging.INFO, __file__, 1, "request", None, None)
    record.__dict__.update(method="POST", path="/v1/chat/completions", status=200, duration_ms=3.2)
    ours = JsonFormatter()
    _row("log line: core.logging.JsonFormatter", _per_call_us(lambda: ours.format(record)))
    try:
        from pythonjsonlogger.json import JsonFormatter as PJL
    except ImportError:
        print("python-json-logger: not installed")
        return
    theirs = PJL("%(asctime)s %(levelname)s %(name)s %(message)s", timestamp=True)
    _row("log line: python-json-logger JsonFormatter", _per_call_us(lambda: theirs.format(record)))
    try:
        import structlog
    except ImportError:
        print("structlog: not installed")
        return
    bridge = structlog.stdlib.ProcessorFormatter(
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.JSONRenderer(),
        ],
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.stdlib.ExtraAdder(),
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
    )
    _row(
        "log line: structlog ProcessorFormatter (stdlib records)",
        _per_call_us(lambda: bridge.format(record)),
    )


def token_bucket() -> None:
    from api.limits import TokenBuckets

    buckets = TokenBuckets(rate=1e9, burst=1_000_000_000)
    _row("rate limit: api.limits.TokenBuckets.take", _per_call_us(lambda: buckets.take("t")))
    try:
        from limits import RateLimitItemPerMinute
        from limits.storage import MemoryStorage
        from limits.strategies import FixedWindowRateLimiter, MovingWindowRateLimiter
    except ImportError:
        print("limits: not installed")
        return
    storage = MemoryStorage()
    item = RateLimitItemPerMinute(1_000_000_000)
    fixed = FixedWindowRateLimiter(storage)
    moving = MovingWindowRateLimiter(storage)
    _row(
        "rate limit: limits FixedWindowRateLimiter.hit", _per_call_us(lambda: fixed.hit(item, "t"))
    )
    _row(
        "rate limit: limits MovingWindowRateLimiter.hit",
        _per_call_us(lambda: moving.hit(item, "m"), number=2000),
    )


if __name__ == "__main__":
    cloudevents_envelope()
    webhook_signing()
    json_logging()
    token_bucket()
