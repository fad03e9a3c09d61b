"""How an evaluation ends when the suite cannot run as asked: a provider no adapter serves, a
provider that refuses the suite's requests (or only its temperature, or a feature a case
tests), a lifecycle workflow that is gone, a provider that rate-limits with Retry-After, a start
whose answer Temporal did not give, a case that fails while others wait, and two starts at the
same moment. API → Temporal → the real adapters → the local upstream, as
tests/test_evaluation.py."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.evaluation_refusals import RETRY_AFTER_CAP_SECONDS, retry_delay
from activities.evaluation_types import EvaluationInput, FailInput, Prepared
from activities.lifecycle_types import workflow_id
from api.evaluations import UNSTARTED_GRACE_SECONDS, start
from api.problems import Problem
from core.payload_converter import data_converter
from core.settings import Settings
from domain.enums import Capability
from domain.suite import Suite
from providers.errors import ErrorKind, ProviderError
from providers.upstream import Fault, FaultKind, UpstreamServer
from providers.upstream.suite_responders import competent_responder
from store.artifacts import EVIDENCE_DIR
from store.db import transaction
from store.tables import EvaluationRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import register
from tests.helpers.deadline import eventually
from workflows.evaluate import EvaluateDeploymentWorkflow


@pytest.fixture(scope="module")
async def upstream() -> AsyncIterator[UpstreamServer]:
    async with UpstreamServer() as server:
        yield server


@pytest.fixture
async def auth(token_for: TokenFactory, tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await token_for(tenant)}"}


async def _evaluate(
    http: httpx.AsyncClient, auth: dict[str, str], dep: str, key: str | None = None
) -> httpx.Response:
    return await http.post(
        f"/factory/model-deployments/{dep}/evaluate",
        headers={**auth, "Idempotency-Key": key or uuid.uuid4().hex},
    )


async def _ended(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    dep: str,
    *,
    timeout: float = 60,
    release: Any = None,
) -> dict[str, Any]:
    """The deployment once its latest evaluation ended."""

    async def done() -> dict[str, Any] | None:
        if release is not None:
            release()
        body = (await http.get(f"/factory/model-deployments/{dep}", headers=auth)).json()
        ev = body.get("evaluation") or {}
        return body if ev.get("status") in ("Completed", "Failed") else None

    return dict(await eventually(done, timeout=timeout, interval=0.3))


async def test_a_provider_no_adapter_serves_fails_the_evaluation_at_once(
    http: httpx.AsyncClient, auth: dict[str, str], upstream: UpstreamServer
) -> None:
    # Registration takes any provider name. Preparing raised the adapter lookup's error, not
    # CannotRun, and Temporal retried it for good: Running for ever, and every later
    # evaluation of the deployment a 409.
    dep = "evalx/azure"
    await register(
        http, auth, dep, provider="azure-openai", model="gpt-4.1",
        endpointRef=upstream.endpoint_ref,
    )  # fmt: skip
    assert (await _evaluate(http, auth, dep)).status_code == 202
    body = await _ended(http, auth, dep)
    assert body["state"] == "Candidate"
    assert body["evaluation"]["status"] == "Failed"
    assert "no adapter serves provider 'azure-openai'" in body["evaluation"]["reason"]
    # Nothing holds the deployment: another evaluation starts (and ends the same way).
    again = await _evaluate(http, auth, dep)
    assert again.status_code == 202, again.text
    assert (await _ended(http, auth, dep))["evaluation"]["status"] == "Failed"
    assert upstream.requests("gpt-4.1") == 0


async def test_preparing_is_retried_within_a_bound() -> None:
    """A prepare that keeps failing (not CannotRun: the store away, a bug) was retried for
    good under Temporal's default policy. Time-skipping: the backoff passes in workflow time."""
    tried: list[int] = []
    failed: list[str] = []

    @activity.defn(name="evaluation_prepare")
    async def prepare(data: EvaluationInput) -> Prepared:
        tried.append(activity.info().attempt)
        raise ConnectionRefusedError("the store is away")

    @activity.defn(name="evaluation_fail")
    async def fail(data: FailInput) -> None:
        failed.append(data.reason)

    test_server = Path(sys.executable).parent / "temporal-test-server"
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=data_converter,
        test_server_existing_path=str(test_server),
        test_server_startup_timeout=timedelta(seconds=60),
    )
    queue = f"eval-prepare-{uuid.uuid4().hex[:8]}"
    async with (
        env,
        Worker(
            env.client,
            task_queue=queue,
            workflows=[EvaluateDeploymentWorkflow],
            activities=[prepare, fail],
        ),
    ):
        ref = await env.client.execute_workflow(
            EvaluateDeploymentWorkflow.run,
            EvaluationInput(evaluation_id="e-1", tenant_id="t", deployment_id="d/1"),
            id=queue,
            task_queue=queue,
            execution_timeout=timedelta(hours=2),
        )
    assert ref is None
    assert len(failed) == 1 and "ConnectionRefusedError" in failed[0], failed
    # Five minutes of backoff at 1, 2, 4 … 30 s: a dozen attempts or so, not two hours' worth.
    assert 5 <= len(tried) <= 20, tried


async def test_a_provider_that_refuses_the_suites_requests_fails_the_evaluation(
    http: httpx.AsyncClient, auth: dict[str, str], upstream: UpstreamServer
) -> None:
    # A server refusing every request (here on the Anthropic protocol, an invalid_request_error
    # whatever the request carries, its temperature or not), or a content filter refusing the
    # suite's benign text: each case was scored "the provider returned no answer", and the
    # all-zero scorecard moved the deployment to Evaluated, the evaluation Completed.
    said = "temperature is deprecated for this model"
    upstream.inject("refusing-sim", Fault(kind=FaultKind.CONTENT_POLICY, message=said))
    upstream.inject("filtered-sim", Fault(kind=FaultKind.CONTENT_POLICY))
    cases = (
        ("evalx/refusing", "anthropic", "refusing-sim", "invalid_request"),
        ("evalx/filtered", "openai", "filtered-sim", "content_policy"),
    )
    try:
        for dep, provider, model, _ in cases:
            await register(
                http, auth, dep, provider=provider, model=model,
                endpointRef=upstream.endpoint_ref,
            )  # fmt: skip
            assert (await _evaluate(http, auth, dep)).status_code == 202
        for dep, _, model, kind in cases:
            body = await _ended(http, auth, dep)
            assert body["state"] == "Candidate", body
            ev = body["evaluation"]
            assert ev["status"] == "Failed", ev
            assert "provider refused the request of case " in ev["reason"]
            assert f"({kind}, status 400)" in ev["reason"], ev["reason"]
            # Asked again without the suite's temperature, the server refused it as well.
            again = " sent without temperature: " in ev["reason"]
            assert again is (kind == "invalid_request"), ev["reason"]
            # The kind and the status, never the provider's words.
            assert said not in ev["reason"] and "safety system" not in ev["reason"]
            # The run stopped at the refusal: the rest of the suite was not sent.
            assert upstream.requests(model) < len(Suite().cases)
    finally:
        upstream.state.clear_faults("refusing-sim")
        upstream.state.clear_faults("filtered-sim")


async def test_a_context_the_deployment_refuses_as_too_long_is_scored(
    http: httpx.AsyncClient, auth: dict[str, str], upstream: UpstreamServer
) -> None:
    """The other side of the rule: a context-length refusal is the deployment failing the
    reliable-context cases it cannot hold, as the router's requests of that size would."""
    upstream.register("narrow-sim", competent_responder(Suite()))
    upstream.state.configure("narrow-sim", context_window=4000)
    await register(
        http, auth, "evalx/narrow", model="narrow-sim", endpointRef=upstream.endpoint_ref
    )
    assert (await _evaluate(http, auth, "evalx/narrow")).status_code == 202
    body = await _ended(http, auth, "evalx/narrow", timeout=120)
    assert body["evaluation"]["status"] == "Completed", body["evaluation"]
    assert body["state"] == "Evaluated"
    caps = body["evidence"]["capabilities"]
    assert caps[Capability.RELIABLE_CONTEXT.value]["score"] < 1.0
    assert caps[Capability.JSON_SCHEMA.value]["score"] == 1.0


async def test_evidence_lands_when_the_lifecycle_workflow_is_gone(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    temporal_client: Client,
    tenant: str,
) -> None:
    # A lifecycle terminated by hand (or a cluster restored without its histories): the
    # import failed the evaluation as "retired during the evaluation", after every case had
    # been paid for. The API starts such a lifecycle again from its row; so does the import.
    dep = "evalx/lost"
    await register(http, auth, dep, model="lost-sim", endpointRef=upstream.endpoint_ref)
    await temporal_client.get_workflow_handle(workflow_id(tenant, dep)).terminate(
        reason="an operator's clean-up"
    )
    assert (await _evaluate(http, auth, dep)).status_code == 202
    body = await _ended(http, auth, dep, timeout=120)
    assert body["evaluation"]["status"] == "Completed", body["evaluation"]
    assert body["state"] == "Evaluated"
    assert body["evidence"]["evidenceRef"] == body["evaluation"]["evidenceRef"]


# The rate limit's window: past the case policy's four attempts at 0, 1, 3 and 7 s, so that
# retried on the policy's backoff the case fails inside it; told to wait as long, it is
# answered. (No shorter window can tell the two apart.)
WINDOW_S = 9.0


async def test_a_rate_limited_case_waits_as_the_provider_says(
    http: httpx.AsyncClient, auth: dict[str, str], upstream: UpstreamServer
) -> None:
    # Retried at 1, 2 and 4 s whatever Retry-After said, a provider limiting for longer than
    # that failed the evaluation ("provider unavailable (rate_limit)").
    dep, model = "evalx/limited", "limited-sim"
    await register(http, auth, dep, model=model, endpointRef=upstream.endpoint_ref)
    upstream.inject(model, Fault(kind=FaultKind.RATE_LIMIT, retry_after=WINDOW_S))
    # The provider's window ends, as a provider's does, whatever the router does meanwhile.
    lifted = asyncio.get_running_loop().call_later(WINDOW_S, upstream.state.clear_faults, model)
    try:
        assert (await _evaluate(http, auth, dep)).status_code == 202
        body = await _ended(http, auth, dep, timeout=120)
    finally:
        lifted.cancel()
        upstream.state.clear_faults(model)
    assert body["evaluation"]["status"] == "Completed", body["evaluation"]
    assert body["state"] == "Evaluated"


def test_a_retry_after_defers_the_next_attempt_within_a_bound() -> None:
    def limited(after: float | None) -> ProviderError:
        return ProviderError(ErrorKind.RATE_LIMIT, provider="openai", retry_after=after)

    assert retry_delay(limited(None)) is None  # the policy's backoff
    assert retry_delay(limited(0)) is None
    assert retry_delay(limited(2.5)) == timedelta(seconds=2.5)
    assert retry_delay(limited(86_400)) == timedelta(seconds=RETRY_AFTER_CAP_SECONDS)


async def test_two_starts_at_the_same_moment_run_one_evaluation(
    http: httpx.AsyncClient, auth: dict[str, str], upstream: UpstreamServer, settings: Settings
) -> None:
    # The running check and the insert were two transactions: starts with different keys at
    # the same moment each found none running, and each ran the whole suite.
    dep, model = "evalx/race", "race-sim"
    await register(http, auth, dep, model=model, endpointRef=upstream.endpoint_ref)
    upstream.inject(model, Fault(kind=FaultKind.SLOW_FIRST_TOKEN, delay=120))
    try:
        answers = await asyncio.gather(*(_evaluate(http, auth, dep, f"race-{i}") for i in range(8)))
        statuses = sorted(a.status_code for a in answers)
        assert statuses == [202] + [409] * 7, [a.text for a in answers]
        [started] = [a.json() for a in answers if a.status_code == 202]
        assert all(
            a.json()["evaluationId"] == started["evaluationId"]
            for a in answers
            if a.status_code == 409
        )
        retired = await http.post(f"/factory/model-deployments/{dep}/retire", headers=auth)
        assert retired.status_code == 200, retired.text
        await _ended(http, auth, dep, release=upstream.state.release)
    finally:
        upstream.state.clear_faults(model)
        upstream.state.release()
    # One suite ran: at most its concurrency of cases reached the provider before the retirement.
    assert upstream.requests(model) <= settings.evaluation_concurrency


def _record(settings: Settings, tenant: str, evidence_ref: str) -> dict[str, Any]:
    """An evaluation's stored record (case ids and reasons, no content)."""
    digest = evidence_ref.removeprefix("sha256:")
    path = settings.artifact_root / EVIDENCE_DIR / tenant / digest[:2] / digest
    return dict(json.loads(path.read_bytes()))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_model_that_refuses_the_suites_temperature_is_evaluated_without_it(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    settings: Settings,
    tenant: str,
    provider: str,
) -> None:
    # OpenAI's reasoning models answer 400 to `temperature: 0` ("only the default (1) value is
    # supported"), Anthropic's newest to any temperature: the first case's refusal ended the
    # evaluation, and nothing the operator could correct would let it run.
    dep, model = f"evalx/reasoning-{provider}", f"reasoning-{provider}-sim"
    upstream.register(model, competent_responder(Suite()))
    upstream.state.configure(model, refuses=["temperature"])
    await register(
        http, auth, dep, provider=provider, model=model, endpointRef=upstream.endpoint_ref
    )
    assert (await _evaluate(http, auth, dep)).status_code == 202
    body = await _ended(http, auth, dep, timeout=120)
    ev = body["evaluation"]
    assert ev["status"] == "Completed", ev
    assert body["state"] == "Evaluated"
    if provider == "openai":  # the competent model answers the whole suite on its protocol
        assert all(c["score"] == 1.0 for c in body["evidence"]["capabilities"].values())
    assert ev["summary"]["temperatureRefused"] is True
    assert _record(settings, tenant, ev["evidenceRef"])["temperatureRefused"] is True
    # Only the cases sent before the first refusal was heard carried it: those scheduled
    # after it go without, rather than each meeting the refusal again.
    refused = [r for r in upstream.state.ledger if r.model == model and r.status == 400]
    assert 1 <= len(refused) <= settings.evaluation_concurrency, len(refused)


async def test_a_model_without_structured_output_fails_those_cases_and_is_evaluated(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    settings: Settings,
    tenant: str,
) -> None:
    # A model without structured outputs answers 400 to any `response_format` case: the
    # refusal ended the evaluation, where the model had simply not offered what those cases
    # test. The cases are failed, naming the feature, and the rest of the suite runs.
    dep, model = "evalx/no-format", "no-format-sim"
    upstream.register(model, competent_responder(Suite()))
    upstream.state.configure(model, refuses=["response_format"])
    await register(http, auth, dep, model=model, endpointRef=upstream.endpoint_ref)
    assert (await _evaluate(http, auth, dep)).status_code == 202
    body = await _ended(http, auth, dep, timeout=120)
    ev = body["evaluation"]
    assert ev["status"] == "Completed", ev
    assert body["state"] == "Evaluated"
    caps = body["evidence"]["capabilities"]
    assert caps[Capability.JSON_SCHEMA.value]["score"] < 1.0
    assert caps[Capability.TOOL_CALLING.value]["score"] == 1.0
    # The temperature was not the cause: the suite went on with it.
    assert ev["summary"]["temperatureRefused"] is False
    results = _record(settings, tenant, ev["evidenceRef"])["results"]
    refused = {r["case_id"] for r in results if "refused the request's" in r["reason"]}
    asked = {c.case_id for c in Suite().cases if "response_format" in c.start().optional_features}
    assert refused == asked and asked, (refused, asked)
    assert all(
        r["reason"] == "the provider refused the request's 'response_format'"
        for r in results
        if r["case_id"] in refused
    )


class _StartAnswerLost:
    """A Temporal client whose workflow starts get no answer: taken by Temporal first (the
    answer lost on its way back), or not."""

    def __init__(self, client: Client, *, taken: bool) -> None:
        self._client, self._taken = client, taken

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def start_workflow(self, *args: Any, **kwargs: Any) -> Any:
        if self._taken:
            await self._client.start_workflow(*args, **kwargs)
        raise RPCError("connection reset", RPCStatusCode.UNAVAILABLE, b"")


async def test_a_start_whose_answer_is_lost_keeps_its_row_and_no_second_run_starts(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    temporal_client: Client,
    tenant: str,
) -> None:
    # Temporal took the start, then its answer was lost: the API deleted the Running row, so
    # another key found nothing running and ran a second suite beside the first (billed twice),
    # and the first recorded into no row.
    dep, model = "evalx/lost-answer", "lost-answer-sim"
    await register(http, auth, dep, model=model, endpointRef=upstream.endpoint_ref)
    upstream.inject(model, Fault(kind=FaultKind.SLOW_FIRST_TOKEN, delay=120))
    lost: Any = _StartAnswerLost(temporal_client, taken=True)
    try:
        with pytest.raises(Problem) as refused:
            await start(lost, sessions, settings.temporal_task_queue, 4, tenant, dep, "lost-1")
        assert refused.value.status == 503 and "same key" in refused.value.detail
        read = (await http.get(f"/factory/model-deployments/{dep}", headers=auth)).json()
        kept = read["evaluation"]
        assert kept is not None and kept["status"] == "Running", kept
        await eventually(lambda: upstream.requests(model) > 0, timeout=60, interval=0.05)
        other = await _evaluate(http, auth, dep, "lost-2")
        assert other.status_code == 409, other.text
        assert other.json()["evaluationId"] == kept["evaluationId"]
        again = await _evaluate(http, auth, dep, "lost-1")  # the same key finds its run
        assert again.status_code == 202 and again.json()["evaluationId"] == kept["evaluationId"]
        upstream.state.clear_faults(model)
        body = await _ended(http, auth, dep, timeout=120, release=upstream.state.release)
    finally:
        upstream.state.clear_faults(model)
        upstream.state.release()
    # The run recorded into the row the start kept.
    assert body["evaluation"]["evaluationId"] == kept["evaluationId"]
    assert body["evaluation"]["status"] == "Completed", body["evaluation"]
    assert body["evidence"]["evidenceRef"] == body["evaluation"]["evidenceRef"]


async def test_a_start_never_taken_is_settled_as_never_started_past_its_grace(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    temporal_client: Client,
    tenant: str,
) -> None:
    """The other side of a start with no answer: Temporal never took it. Its Running row holds
    the deployment's other keys off while the start may still be on its way, and is settled as
    never started when read past the grace (`api.evaluations.settled`)."""
    dep, model = "evalx/never-taken", "never-taken-sim"
    await register(http, auth, dep, model=model, endpointRef=upstream.endpoint_ref)
    lost: Any = _StartAnswerLost(temporal_client, taken=False)
    with pytest.raises(Problem) as refused:
        await start(lost, sessions, settings.temporal_task_queue, 4, tenant, dep, "never-1")
    assert refused.value.status == 503
    early = await _evaluate(http, auth, dep, "never-2")
    assert early.status_code == 409, early.text
    eid = early.json()["evaluationId"]
    # The grace gone by: the row as it is then.
    async with transaction(sessions) as session:
        row = await session.get(EvaluationRow, eid)
        assert row is not None and row.status == "Running"
        row.started_at = datetime.now(UTC) - timedelta(seconds=UNSTARTED_GRACE_SECONDS + 1)
    read = (await http.get(f"/factory/model-deployments/{dep}", headers=auth)).json()
    assert read["evaluation"]["evaluationId"] == eid
    assert read["evaluation"]["status"] == "Failed", read["evaluation"]
    assert "never started" in read["evaluation"]["reason"]
    assert upstream.requests(model) == 0
    # Its key again, as the 503 said: the run starts, and its row says Running again, so that
    # no other key runs a second suite beside it.
    again = await _evaluate(http, auth, dep, "never-1")
    assert again.status_code == 202, again.text
    assert again.json()["evaluationId"] == eid and again.json()["status"] == "Running"
    beside = await _evaluate(http, auth, dep, "never-3")
    assert beside.status_code == 409, beside.text
    assert (await _ended(http, auth, dep, timeout=120))["evaluation"]["status"] == "Completed"
