"""The fault benchmark's judgement (bench/fault_calls.py, bench/faults_report.py): what counts as
a clean refusal, which calls a fault touched, and a target shown as missed when a receipt is
left open, a key is called twice, a 500 is answered or a call is dropped away from the kill."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx

from bench.fault_calls import (
    DROPPED,
    LOST,
    OK,
    REFUSED,
    SPENT,
    Call,
    error_type,
    status_outcome,
)
from bench.fault_injection import Fault
from bench.fault_receipts import Receipts
from bench.faults_report import AFTER_SECONDS, around, first_answer_after, section, targets
from bench.faults_run import FaultRun


def _call(n: int, at: float, outcome: str = OK, took: float = 0.2) -> Call:
    return Call(f"k{n}", n, False, at, took, outcome)


def _run(calls: list[Call], upstream: int | None = None, open_: int = 0) -> FaultRun:
    faults = [Fault("PostgreSQL stopped", 10, 10, 15), Fault("API killed", 40, 40, 41)]
    run = FaultRun(60, 16, 20, datetime(2026, 12, 5, tzinfo=UTC), faults, calls)
    total = len(calls)
    run.after_load = run.after_retries = Receipts(
        total, total - open_, {"Completed / usage Reported": total - open_}, {}, 1.0
    )
    run.upstream_calls = total if upstream is None else upstream
    return run


def test_a_refusal_is_a_429_or_503_that_says_when_to_come_back() -> None:
    assert status_outcome(503, httpx.Headers({"Retry-After": "1"})) == REFUSED
    assert status_outcome(429, httpx.Headers({"Retry-After": "2"})) == REFUSED
    assert status_outcome(409, httpx.Headers()) == SPENT
    assert status_outcome(503, httpx.Headers()) == "HTTP 503"
    assert status_outcome(500, httpx.Headers({"Retry-After": "1"})) == "HTTP 500"


def test_the_error_type_comes_from_either_envelope_and_never_fails() -> None:
    assert error_type(b'{"error": {"type": "unavailable"}}') == "unavailable"
    assert error_type(b'{"type": "about:blank", "reason": "temporal-unreachable"}') == (
        "temporal-unreachable"
    )
    assert error_type(b"<html>") == "not JSON"
    assert error_type(b"[1]") == "not an object"


def test_a_fault_touches_the_calls_in_flight_from_its_start_to_a_while_after() -> None:
    fault = Fault("PostgreSQL stopped", 10, 10, 15)
    before, inside, across, after, late = (
        _call(0, 5),
        _call(1, 12, REFUSED),
        _call(2, 9.9, DROPPED, took=0.5),
        _call(3, 15 + AFTER_SECONDS - 0.5),
        _call(4, 15 + AFTER_SECONDS + 0.5),
    )
    calls = [before, inside, across, after, late]
    assert around(calls, fault) == [inside, across, after]
    assert first_answer_after(calls, fault) == AFTER_SECONDS - 0.5


def test_a_clean_run_meets_every_target() -> None:
    run = _run([_call(0, 1), _call(1, 12, REFUSED), _call(2, 40, DROPPED)])
    # The dropped call's key, spent by a sweep, or its answer lost with the killed process.
    run.retries = [_call(2, 0, SPENT), _call(2, 0, LOST)]
    assert not any("NOT met" in line for line in targets(run))
    text = section(run)
    assert text.startswith("<!-- bench:faults:start -->") and "NOT met" not in text


def _lost_away_from_the_kill(calls: list[Call]) -> list[str]:
    run = _run(calls)
    run.retries = [_call(1, 0, LOST)]  # call 1 was answered at 2 s, nowhere near the kill
    return targets(run)


def test_each_robustness_failure_shows_as_a_missed_target() -> None:
    calls = [_call(0, 1), _call(1, 2)]
    missed = {
        "open": targets(_run(calls, open_=1)),
        "twice": targets(_run(calls, upstream=3)),
        "500": targets(_run([*calls, _call(2, 3, "HTTP 500")])),
        "409 to a new key": targets(_run([*calls, _call(2, 3, SPENT)])),
        "an answer lost away from the kill": _lost_away_from_the_kill(calls),
        "dropped away from the kill": targets(_run([*calls, _call(2, 25, DROPPED)])),
    }
    for what, lines in missed.items():
        assert sum("NOT met" in line for line in lines) == 1, what
