"""The pure resilience rules: backoff and Retry-After bounds, the breaker's states, and which
candidate may answer after another failed."""

from __future__ import annotations

import uuid

from activities.resilience import BreakerRegistry, Resilience
from api.come_back import ComeBack
from domain.breaker import Breaker, BreakerState
from domain.fallback import Next, after_failure, may_answer
from domain.invocation import InvocationInput, Operation, Target
from domain.retry import RetryRules, retry_delay

RULES = RetryRules(max_attempts=3, base_delay=0.2, max_delay=1.0, max_retry_after=5.0)


def test_backoff_grows_with_jitter_and_never_loops_tightly() -> None:
    first = [retry_delay(RULES, 1, "server_error", True, None, d, 60) for d in (0.0, 0.999)]
    second = [retry_delay(RULES, 2, "server_error", True, None, d, 60) for d in (0.0, 0.999)]
    assert first[0] == 0.1 and 0.19 < (first[1] or 0) <= 0.2
    assert second[0] == 0.2 and 0.39 < (second[1] or 0) <= 0.4
    assert retry_delay(RULES, 3, "server_error", True, None, 0.5, 60) is None  # attempts spent


def test_retry_after_is_honoured_within_its_bound_and_the_budget() -> None:
    assert retry_delay(RULES, 1, "rate_limit", True, 2.0, 0.5, 60) == 2.0
    assert retry_delay(RULES, 1, "rate_limit", True, 30.0, 0.5, 60) is None
    assert retry_delay(RULES, 1, "rate_limit", True, 2.0, 0.5, 1.0) is None  # past the budget


def test_never_retried_on_the_same_deployment() -> None:
    for kind in ("context_length", "content_policy", "auth", "invalid_request"):
        assert retry_delay(RULES, 1, kind, False, None, 0.5, 60) is None
    # A silent provider: waiting for it again would double the caller's wait.
    assert retry_delay(RULES, 1, "timeout", True, None, 0.5, 60) is None


def test_breaker_opens_cools_down_trials_once_and_closes() -> None:
    now = [0.0]
    b = Breaker(lambda: now[0], threshold=3, cooldown=2.0)
    for _ in range(3):
        assert b.allow()
        b.failure()
    assert b.state is BreakerState.OPEN and not b.allow()
    now[0] = 2.1
    assert b.allow() and b.state is BreakerState.HALF_OPEN
    assert not b.allow()  # a single trial
    b.failure()
    assert b.state is BreakerState.OPEN and not b.allow()
    now[0] = 4.3
    assert b.allow()
    b.success()
    assert b.state is BreakerState.CLOSED and b.allow()


def test_breaker_wait_is_the_rest_of_a_cool_down_or_of_a_retry_after() -> None:
    now = [0.0]
    b = Breaker(lambda: now[0], threshold=2, cooldown=5.0)
    assert b.wait() == 0.0
    b.failure(retry_after=30.0)  # still closed: only the provider's word delays a caller
    assert b.state is BreakerState.CLOSED and b.allow() and b.wait() == 30.0
    now[0] = 1.0
    b.failure()
    assert b.state is BreakerState.OPEN and b.wait() == 29.0
    now[0] = 40.0
    assert b.wait() == 0.0 and b.allow()  # half-open: the trial is in flight
    now[0] = 41.5
    assert b.wait() == 3.5
    b.success()
    assert b.wait() == 0.0


def test_come_back_is_when_a_candidate_may_next_be_tried_within_bounds() -> None:
    now = [0.0]
    breakers = BreakerRegistry(threshold=1, cooldown=7.0, clock=lambda: now[0])
    come_back = ComeBack(breakers, None, cap_seconds=60)
    breakers.get("t", "a").failure()
    breakers.get("t", "b").failure(retry_after=600.0)
    now[0] = 2.5
    assert come_back.after_failure("t", ["a", "b"]) == 5  # a's cool-down ends first
    assert come_back.after_failure("t", ["b"]) == 60  # the provider's 600 s, capped
    assert come_back.after_failure("t", ["a", "never-called"]) == 1  # at least a second
    assert come_back.after_failure("other-tenant", ["a"]) == 1
    # Not routable and not trialled by this process: the health probe decides; the cap.
    assert come_back.none_routable("t", ["a"]) == 60


def _target(dep: str, **over: object) -> Target:
    fields: dict[str, object] = {
        "deployment_id": dep,
        "provider": "openai",
        "model": "m",
        "endpoint_ref": "env:X",
        "privacy_class": "Regional",
        "context_window_tokens": 100_000,
    }
    fields.update(over)
    return Target.model_validate(fields)


def _input(targets: list[Target], **over: object) -> InvocationInput:
    fields: dict[str, object] = {
        "invocation_id": uuid.uuid4(),
        "tenant_id": "t",
        "project_id": "p",
        "profile_id": "prof",
        "policy_decision_id": uuid.uuid4(),
        "idempotency_key": "k",
        "request_hash": "h",
        "targets": targets,
        "pricing_revision": "r",
        "caller_token": "c",
        "caller_queue": "q",
        "timeout_seconds": 10,
        "fallback_enabled": True,
        "allowed_privacy_classes": ["Regional", "Confidential"],
    }
    fields.update(over)
    return InvocationInput.model_validate(fields)


def test_fallback_rules() -> None:
    a, b = _target("a"), _target("b")
    data = _input([a, b])
    assert may_answer(data, a, b, "server_error")
    assert not may_answer(_input([a, b], fallback_enabled=False), a, b, "server_error")
    external = _target("x", privacy_class="External", external=True)
    confidential = _input([a, external], data_classification="Confidential")
    assert not may_answer(confidential, a, external, "server_error")
    assert not may_answer(data, a, external, "server_error")  # outside the plan's classes
    # Context length: only a larger (known) window.
    assert not may_answer(data, a, b, "context_length")
    big = _target("big", context_window_tokens=200_000)
    assert may_answer(data, a, big, "context_length")
    # Embeddings: the same vector space only.
    e1, e2 = (
        _target("e1", embedding_compatibility="s1"),
        _target("e2", embedding_compatibility="s2"),
    )
    embed = _input([e1, e2], operation=Operation.EMBED)
    assert not may_answer(embed, e1, e2, "server_error")
    assert after_failure("content_policy") is Next.STOP
    assert after_failure("context_length") is Next.MOVE_ON


def test_timeouts_per_profile_then_per_deployment() -> None:
    res = Resilience(overrides={"profile:p": {"idle": 5.0}, "deployment:d": {"idle": 7.0}})
    assert res.timeouts_for("p", "x").idle == 5.0
    assert res.timeouts_for("p", "d").idle == 7.0
    assert res.timeouts_for("q", "x").first_token == 30.0


def test_a_trial_refused_as_busy_is_not_reported_as_sustained_failure() -> None:
    # A rate limit or an overload: the provider answered, and asked for less. Reported, the
    # deployment went Degraded, and Approved again at the one-token recovery trial, every
    # cool-down for as long as the rate limit lasted.
    now = [0.0]
    reports: list[tuple[str, bool]] = []
    breakers = BreakerRegistry(threshold=1, cooldown=5.0, clock=lambda: now[0])
    breakers.report = lambda _tenant, deployment, healthy: reports.append((deployment, healthy))
    for deployment, busy in (("limited", True), ("down", False)):
        breaker = breakers.get("t", deployment)
        breaker.failure(busy=busy)  # opens it
        now[0] += 5.0
        assert breaker.allow()  # the trial
        breaker.failure(busy=busy)  # fails: open again, held off as any open breaker
        assert breaker.state is BreakerState.OPEN and not breaker.allow()
    assert reports == [("down", False)]


def test_a_call_begun_before_the_breaker_opened_moves_it_no_more() -> None:
    # A long stream begun ahead of the outage that completes once the breaker is open says
    # nothing of the provider now. It closed the breaker and reported the deployment
    # recovered: one Approved ⇄ Degraded flap per long stream in flight.
    now = [0.0]
    reports: list[bool] = []
    breakers = BreakerRegistry(threshold=1, cooldown=5.0, clock=lambda: now[0])
    breakers.report = lambda _tenant, _deployment, healthy: reports.append(healthy)
    breaker = breakers.get("t", "a")
    long_stream = now[0]  # began while all was well
    now[0] = 1.0
    breaker.failure(started_at=now[0])  # opens it
    now[0] = 6.0
    assert breaker.allow()  # the trial
    trial = now[0]
    breaker.failure(started_at=trial)  # fails: sustained, reported
    assert reports == [False]
    now[0] = 7.0
    breaker.success(started_at=long_stream)
    assert breaker.state is BreakerState.OPEN and reports == [False]
    # Nor does such a call failing late, while a trial is out, reopen it ahead of the trial.
    now[0] = 11.5
    assert breaker.allow() and breaker.state is BreakerState.HALF_OPEN
    trial = now[0]
    breaker.failure(started_at=long_stream)
    assert breaker.state is BreakerState.HALF_OPEN
    breaker.success(started_at=trial)  # the trial's own answer is heard
    assert breaker.state is BreakerState.CLOSED and reports == [False, True]


def test_a_forgotten_breaker_leaves_a_fresh_one_and_reports_nothing_more() -> None:
    # The recovery trials gave up: the probe owns the deployment. The open breaker outlived
    # the outage, refusing all but one trial per cool-down once the probe approved the
    # deployment again, and that trial's one blip reported it Degraded for the fleet again.
    now = [0.0]
    reports: list[bool] = []
    breakers = BreakerRegistry(threshold=3, cooldown=5.0, clock=lambda: now[0])
    breakers.report = lambda _tenant, _deployment, healthy: reports.append(healthy)
    held = breakers.get("t", "a")  # as a call in flight holds it
    for _ in range(3):
        held.failure()
    now[0] = 5.0
    assert held.allow()
    held.failure()
    assert reports == [False]
    breakers.forget("t", "a")
    now[0] = 6.0
    fresh = breakers.get("t", "a")
    assert fresh is not held and fresh.allow() and fresh.allow()  # not one trial: every call
    fresh.failure()
    assert fresh.state is BreakerState.CLOSED and reports == [False]
    # The forgotten one, still held by a call, reports nothing whatever it comes to.
    now[0] = 20.0
    assert held.allow()
    held.failure()  # its trial failing: sustained failure, but not this process's news
    now[0] = 30.0
    assert held.allow()
    held.success()
    assert reports == [False]
