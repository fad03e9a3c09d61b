"""EvaluateDeployment end to end: API → Temporal → the real SDKs → the local upstream, with one
model answering the suite competently and one scripted to fail tool-calling, and the fixed
checks of a reranker and of an embedding model."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select
from temporalio.client import Client, WorkflowExecutionStatus

from api.evaluations import settled
from core.settings import Settings
from domain.enums import Capability
from domain.suite import Oracle, Suite
from providers.upstream import Fault, FaultKind, UpstreamServer
from providers.upstream.suite_responders import competent_responder, failing_responder
from store.artifacts import EVIDENCE_DIR
from store.db import transaction
from store.tables import EvaluationRow, OutboxEventRow
from tests.conftest import TokenFactory, free_port
from tests.helpers.catalog import profile_event, publish, register
from tests.helpers.cli import run
from tests.helpers.deadline import eventually
from tests.helpers.dump import pg_dump


@pytest.fixture(scope="module")
async def upstream() -> AsyncIterator[UpstreamServer]:
    async with UpstreamServer() as server:
        suite = Suite()
        server.register("good-sim", competent_responder(suite))
        server.register("bad-sim", failing_responder(suite, {Capability.TOOL_CALLING}))
        yield server


@pytest.fixture
async def auth(token_for: TokenFactory, tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await token_for(tenant)}"}


async def _evaluate(
    http: httpx.AsyncClient, auth: dict[str, str], dep: str, key: str
) -> dict[str, Any]:
    resp = await http.post(
        f"/factory/model-deployments/{dep}/evaluate", headers={**auth, "Idempotency-Key": key}
    )
    assert resp.status_code == 202, resp.text
    return dict(resp.json())


async def _finished(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    dep: str,
    release: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """The deployment once its evaluation ended; `release` is called at each look (a held
    answer whose delay began after an earlier release is let go too)."""

    async def done() -> dict[str, Any] | None:
        if release is not None:
            release()
        body = (await http.get(f"/factory/model-deployments/{dep}", headers=auth)).json()
        ev = body.get("evaluation") or {}
        return body if ev.get("status") in ("Completed", "Failed") else None

    return dict(await eventually(done, timeout=120, interval=0.3))


async def test_gates_hold_end_to_end(
    http: httpx.AsyncClient, auth: dict[str, str], upstream: UpstreamServer, settings: Settings
) -> None:
    for dep, model in (("eval/good", "good-sim"), ("eval/bad", "bad-sim")):
        await register(http, auth, dep, model=model, endpointRef=upstream.endpoint_ref)
    coder = profile_event(
        "coder", ["eval/good", "eval/bad"], {"tool-calling": 0.9}, maxContextTokens=8192
    )
    assert (await publish(http, auth, coder)).status_code == 200

    started = await _evaluate(http, auth, "eval/bad", "bad-1")
    assert started["status"] == "Running" and started["suiteVersion"] == "2026.12.1"
    await _evaluate(http, auth, "eval/good", "good-1")
    bad, good = await _finished(http, auth, "eval/bad"), await _finished(http, auth, "eval/good")

    assert good["state"] == "Evaluated" and good["evaluation"]["status"] == "Completed"
    assert len(good["evidence"]["capabilities"]) == 13
    assert all(c["score"] == 1.0 for c in good["evidence"]["capabilities"].values())
    assert bad["state"] == "Evaluated"
    caps = bad["evidence"]["capabilities"]
    assert caps["tool-calling"]["score"] == 0.0 and caps["tool-calling"]["verdict"] == "fail"
    assert caps["json-schema"]["score"] == 1.0
    assert bad["evaluation"]["summary"]["shortfalls"][0]["capability"] == "tool-calling"

    refused = await http.post("/factory/model-deployments/eval/bad/approve", headers=auth)
    assert refused.status_code == 409
    [refusal] = refused.json()["refusals"]
    assert (
        refusal["profileId"],
        refusal["capability"],
        refusal["threshold"],
        refusal["score"],
    ) == ("coder", "tool-calling", 0.9, 0.0)
    approved = await http.post("/factory/model-deployments/eval/good/approve", headers=auth)
    assert approved.status_code == 200 and approved.json()["state"] == "Approved"

    # The same key starts no second evaluation: same id, no new upstream traffic.
    seen = upstream.requests("bad-sim")
    again = await _evaluate(http, auth, "eval/bad", "bad-1")
    assert again["evaluationId"] == started["evaluationId"] and again["status"] == "Completed"
    assert upstream.requests("bad-sim") == seen

    # No case text and no model output reached the database.
    dump = pg_dump(settings.database_url)
    suite, oracle = Suite(), Oracle(Suite())
    texts = [c.start().first_user_text for c in suite.cases]
    answers = [oracle.answer(c.start()).text for c in suite.cases]
    assert "eval/good" in dump
    # A dump escapes newlines and tabs: each text is looked for by its first plain run.
    lines = [t.split("\n")[0].split("\t")[0][:60] for t in texts + answers]
    leaked = [t for t in lines if len(t) > 20 and t in dump]
    assert leaked == []


async def test_unreachable_provider_leaves_candidate_with_the_reason(
    http: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    await register(http, auth, "eval/dead", endpointRef=f"upstream:127.0.0.1:{free_port()}")
    await _evaluate(http, auth, "eval/dead", f"dead-{uuid.uuid4().hex}")
    body = await _finished(http, auth, "eval/dead")
    assert body["state"] == "Candidate"
    assert body["evaluation"]["status"] == "Failed"
    assert "provider unavailable (connection)" in body["evaluation"]["reason"]

    await register(
        http, auth, "eval/nokey", endpointRef="env:MODEL_ROUTER_PROVIDER_TEST_NO_SUCH_KEY"
    )
    await _evaluate(http, auth, "eval/nokey", "nokey")
    body = await _finished(http, auth, "eval/nokey")
    assert body["state"] == "Candidate"
    assert "credentials" in body["evaluation"]["reason"]
    other = await http.post(
        "/factory/model-deployments/nope/evaluate", headers={**auth, "Idempotency-Key": "x"}
    )
    assert other.status_code == 404


async def test_cli_evaluate_waits_with_progress_and_prints_scores(
    http: httpx.AsyncClient, auth: dict[str, str], upstream: UpstreamServer, cli_env: dict[str, str]
) -> None:
    await register(http, auth, "eval/cli", model="bad-sim", endpointRef=upstream.endpoint_ref)
    result = await run(cli_env, "deployments", "evaluate", "eval/cli", "--wait")
    assert result.exit_code == 0, result.output
    assert "tool-calling" in result.stdout and "fail" in result.stdout
    assert "json-schema" in result.stdout and "1.00" in result.stdout


async def test_cli_evaluate_gives_up_waiting_after_its_timeout(
    http: httpx.AsyncClient, auth: dict[str, str], upstream: UpstreamServer, cli_env: dict[str, str]
) -> None:
    # With no worker polling, an evaluation never ends, and `--wait` waited for good.
    await register(http, auth, "eval/slow", model="slow-sim", endpointRef=upstream.endpoint_ref)
    upstream.inject("slow-sim", Fault(kind=FaultKind.SLOW_FIRST_TOKEN, delay=0.5))
    try:
        result = await run(
            cli_env, "deployments", "evaluate", "eval/slow", "--wait", "--timeout", "1"
        )
    finally:
        upstream.state.clear_faults("slow-sim")
    assert result.exit_code == 1, result.output
    assert "still running after 1 s" in result.stderr


async def test_cli_evaluate_waits_on_its_own_evaluation_not_the_latest(
    http: httpx.AsyncClient, auth: dict[str, str], upstream: UpstreamServer, cli_env: dict[str, str]
) -> None:
    """A key used before replays its evaluation: `--wait` shows that one, ended as it is. It
    used to wait on the deployment's latest, here a later one that failed, and exit 1 on it."""
    await register(http, auth, "eval/own", model="own-sim", endpointRef=upstream.endpoint_ref)
    first = await run(
        cli_env, "deployments", "evaluate", "eval/own", "--wait", "--idempotency-key", "own-1"
    )
    assert first.exit_code == 0, first.output
    upstream.inject("own-sim", Fault(kind=FaultKind.AUTH))
    try:
        later = await run(
            cli_env, "deployments", "evaluate", "eval/own", "--wait", "--idempotency-key", "own-2"
        )
        assert later.exit_code == 1 and "evaluation failed" in later.stderr, later.output
    finally:
        upstream.state.clear_faults("own-sim")
    again = await run(
        cli_env, "deployments", "evaluate", "eval/own", "--wait", "--idempotency-key", "own-1"
    )
    assert again.exit_code == 0, again.output
    # The same evaluation ("evaluation <id> (<status>, suite …)").
    assert first.stdout.split()[1] == again.stdout.split()[1]
    assert "json-schema" in again.stdout


async def test_a_running_row_whose_run_is_not_running_is_settled_when_read(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    settings: Settings,
) -> None:
    """A start refused after Temporal took it discards the row, and the run then records into
    none; the same key again inserts a Running row that nothing ends (its run has ended, or,
    with the API gone between the insert and the start, never began). Such a row stayed
    Running for good: the console polled it each second and `evaluate --wait` never returned."""
    await register(http, auth, "eval/settle", model="settle-sim", endpointRef=upstream.endpoint_ref)
    done = await _evaluate(http, auth, "eval/settle", "settle-1")
    ended = (await _finished(http, auth, "eval/settle"))["evaluation"]
    assert ended["status"] == "Completed"
    # The record is kept apart from the answers, which their retention deletes.
    digest = ended["evidenceRef"].removeprefix("sha256:")
    kept = settings.artifact_root / EVIDENCE_DIR / tenant / digest[:2] / digest
    assert kept.is_file() and not (settings.artifact_root / tenant / digest[:2] / digest).exists()
    # The row as the lost start leaves it: Running, its run ended.
    async with transaction(sessions) as session:
        row = await session.get(EvaluationRow, done["evaluationId"])
        assert row is not None
        row.status, row.ended_at, row.evidence_ref, row.summary = "Running", None, None, None
    read = (await http.get("/factory/model-deployments/eval/settle", headers=auth)).json()
    assert read["evaluation"]["status"] == "Completed", read["evaluation"]
    assert read["evaluation"]["evidenceRef"] == ended["evidenceRef"]

    # A row whose run was never started, past the start's grace.
    await register(http, auth, "eval/never", model="settle-sim", endpointRef=upstream.endpoint_ref)
    async with transaction(sessions) as session:
        session.add(
            EvaluationRow(
                evaluation_id=f"evaluate/{tenant}/eval/never/unstarted",
                tenant_id=tenant,
                deployment_id="eval/never",
                suite_version="x",
                status="Running",
                started_at=datetime.now(UTC) - timedelta(hours=1),
            )
        )
    read = (await http.get("/factory/model-deployments/eval/never", headers=auth)).json()
    assert read["evaluation"]["status"] == "Failed", read["evaluation"]
    assert "never started" in read["evaluation"]["reason"]


async def test_a_reader_never_settles_a_row_over_the_outcome_its_run_recorded(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    temporal_client: Client,
) -> None:
    """A reader that read the row Running while the run recorded its outcome, and then found
    the run ended, settled the row over that outcome: the summary (scores, shortfalls) or the
    failure's reason was lost. The console's panel reads a running evaluation each second."""
    await register(http, auth, "eval/race", model="settle-sim", endpointRef=upstream.endpoint_ref)
    done = await _evaluate(http, auth, "eval/race", "race-1")
    await _finished(http, auth, "eval/race")
    async with sessions() as session:
        recorded = await session.get(EvaluationRow, done["evaluationId"])
    assert recorded is not None and recorded.status == "Completed" and recorded.summary
    # The run records its row, then ends: the reader finds it ended only once Temporal says so
    # (read at once under CI's load, the workflow was still closing, and settled saw it running).
    handle = temporal_client.get_workflow_handle(done["evaluationId"])

    async def ended() -> bool:
        return (await handle.describe()).status is not WorkflowExecutionStatus.RUNNING

    await eventually(ended, timeout=60)
    # The row as that reader holds it: read while the run was still going.
    recorded.status = "Running"
    assert await settled(temporal_client, sessions, recorded)
    async with sessions() as session:
        after = await session.get(EvaluationRow, done["evaluationId"])
    assert after is not None and after.status == "Completed"
    assert after.summary == recorded.summary


async def test_retiring_a_deployment_stops_its_evaluations_cases(
    http: httpx.AsyncClient, auth: dict[str, str], upstream: UpstreamServer, settings: Settings
) -> None:
    # The state was checked once, before the first case: retired during the run, every case
    # still went to the provider (retries included), for evidence the import then refused.
    # Here every answer is held until the retirement has landed: only the cases already sent
    # then (at most the suite's concurrency) reach the provider.
    await register(http, auth, "eval/gone", model="gone-sim", endpointRef=upstream.endpoint_ref)
    upstream.inject("gone-sim", Fault(kind=FaultKind.SLOW_FIRST_TOKEN, delay=120))
    try:
        await _evaluate(http, auth, "eval/gone", "gone-1")
        await eventually(lambda: upstream.requests("gone-sim") > 0, timeout=60, interval=0.05)
        retired = await http.post("/factory/model-deployments/eval/gone/retire", headers=auth)
        assert retired.status_code == 200, retired.text
        # The held answers go, those whose delay began after a first release too.
        ended = (await _finished(http, auth, "eval/gone", upstream.state.release))["evaluation"]
    finally:
        upstream.state.clear_faults("gone-sim")
        upstream.state.release()
    assert upstream.requests("gone-sim") <= settings.evaluation_concurrency
    assert ended["status"] == "Failed" and "is Retired" in ended["reason"], ended


async def test_a_deployment_under_evaluation_is_not_evaluated_twice_at_once(
    http: httpx.AsyncClient, auth: dict[str, str], upstream: UpstreamServer
) -> None:
    # A second key while the first evaluation runs: the whole suite again against the provider,
    # billed twice, the last to end overwriting the other's evidence. The console's form has a
    # new key each time it is shown: Evaluate, Back, Evaluate did it.
    await register(http, auth, "eval/twice", model="twice-sim", endpointRef=upstream.endpoint_ref)
    ended = await _evaluate(http, auth, "eval/twice", "twice-0")
    await _finished(http, auth, "eval/twice")
    upstream.inject("twice-sim", Fault(kind=FaultKind.SLOW_FIRST_TOKEN, delay=120))
    try:
        first = await _evaluate(http, auth, "eval/twice", "twice-1")
        await eventually(lambda: upstream.requests("twice-sim") > 0, timeout=60, interval=0.05)
        second = await http.post(
            "/factory/model-deployments/eval/twice/evaluate",
            headers={**auth, "Idempotency-Key": "twice-2"},
        )
        assert second.status_code == 409, second.text
        assert second.json()["evaluationId"] == first["evaluationId"]
        # A key that has its evaluation answers with it, as before, whichever runs now.
        again = await _evaluate(http, auth, "eval/twice", "twice-0")
        assert again["evaluationId"] == ended["evaluationId"]
        assert (await _evaluate(http, auth, "eval/twice", "twice-1"))["evaluationId"] == first[
            "evaluationId"
        ]
        retired = await http.post("/factory/model-deployments/eval/twice/retire", headers=auth)
        assert retired.status_code == 200, retired.text
        await _finished(http, auth, "eval/twice", upstream.state.release)
    finally:
        upstream.state.clear_faults("twice-sim")
        upstream.state.release()


async def test_evaluating_a_retired_deployment_is_a_409_before_anything_runs(
    http: httpx.AsyncClient, auth: dict[str, str], upstream: UpstreamServer
) -> None:
    await register(
        http, auth, "eval/retired", model="retired-sim", endpointRef=upstream.endpoint_ref
    )
    retired = await http.post("/factory/model-deployments/eval/retired/retire", headers=auth)
    assert retired.status_code == 200 and retired.json()["state"] == "Retired"

    resp = await http.post(
        "/factory/model-deployments/eval/retired/evaluate",
        headers={**auth, "Idempotency-Key": "retired-1"},
    )
    assert resp.status_code == 409, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    problem = resp.json()
    assert problem["state"] == "Retired" and "Retired" in problem["detail"]
    assert problem["field"] == "deploymentId"
    # Nothing ran: no evaluation recorded, no request reached the provider.
    body = (await http.get("/factory/model-deployments/eval/retired", headers=auth)).json()
    assert body["evaluation"] is None
    assert upstream.requests("retired-sim") == 0


async def test_a_reranker_goes_through_the_public_lifecycle_to_serving(
    http: httpx.AsyncClient, auth: dict[str, str], upstream: UpstreamServer
) -> None:
    """register → license → evaluate (the rerank check) → approve → /gateway/rerank, through
    the API alone: a rerank provider, and an OpenAI-compatible server listed by a Rerank
    profile (served at its /rerank)."""
    for dep, provider, model in (
        ("rr/native", "rerank", "rr-native"),
        ("rr/compat", "local-upstream", "rr-compat"),
    ):
        await register(
            http, auth, dep, provider=provider, model=model,
            endpointRef=upstream.endpoint_ref, licenseMetadata=None,
        )  # fmt: skip
        licensed = await http.put(
            f"/factory/model-deployments/{dep}/license",
            json={"commercialUse": True, "licenseName": "apache-2.0"},
            headers=auth,
        )
        assert licensed.status_code == 200, licensed.text
        profile = dep.replace("/", "-")
        event = profile_event(profile, [dep], {}, modality="Rerank")
        assert (await publish(http, auth, event)).status_code == 200

    for dep in ("rr/native", "rr/compat"):
        await _evaluate(http, auth, dep, f"eval-{dep}")
    for dep, model in (("rr/native", "rr-native"), ("rr/compat", "rr-compat")):
        body = await _finished(http, auth, dep)
        assert body["evaluation"]["status"] == "Completed", body["evaluation"]
        assert body["state"] == "Evaluated"
        checked = body["evaluation"]["summary"]["rerank"]
        assert len(checked) == 3 and all(c["passed"] for c in checked.values())
        # The check reached the reranker, and no chat case was sent to it.
        assert upstream.requests(model) == 3
        approved = await http.post(f"/factory/model-deployments/{dep}/approve", headers=auth)
        assert approved.status_code == 200 and approved.json()["state"] == "Approved"

        ranked = await http.post(
            "/gateway/rerank",
            headers=auth,
            json={
                "profileId": dep.replace("/", "-"),
                "query": "red fruit",
                "documents": ["a red fruit", "the sky", "cherry"],
                "topN": 2,
            },
        )
        assert ranked.status_code == 200, ranked.text
        indices = [r["index"] for r in ranked.json()["results"]]
        assert len(indices) == 2 and indices[0] == 0
        assert ranked.json()["receipt"]["deploymentId"] == dep
        assert upstream.requests(model) == 4


async def test_the_longest_tenant_and_deployment_ids_evaluate(
    http: httpx.AsyncClient, token_for: TokenFactory
) -> None:
    # 100 + 200 characters: their evaluation's id once came to 335, past its VARCHAR(300), and
    # starting the evaluation was a 500; the lifecycle's workflow id came to 312, past the 255
    # a Temporal server on SQL visibility takes (as the suite's server is set), and registering
    # was refused.
    tenant = f"t-{uuid.uuid4().hex}".ljust(100, "t")
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    dep = "eval/" + "x" * 195
    await register(http, auth, dep, endpointRef=f"upstream:127.0.0.1:{free_port()}")
    started = await _evaluate(http, auth, dep, "longest")
    assert len(started["evaluationId"]) <= 255
    again = await _evaluate(http, auth, dep, "longest")  # the same key: the same evaluation
    assert again["evaluationId"] == started["evaluationId"]
    body = await _finished(http, auth, dep)
    assert body["evaluation"]["evaluationId"] == started["evaluationId"]
    assert body["evaluation"]["status"] == "Failed"  # nothing listens on its endpoint


async def test_a_case_or_record_on_a_worker_with_another_suite_is_refused(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """A deploy between an evaluation's cases runs them on a worker whose suite changed: a
    removed case raised KeyError (retried to failure), and the record mixed two suites' cases
    under the new version. The case and the record are refused, the evaluation cannot run."""
    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    from activities.evaluation import EvaluationActivities
    from activities.evaluation_refusals import CANNOT_RUN
    from activities.evaluation_types import CaseInput, RecordInput
    from domain.invocation import Target

    # Neither step reaches the store, a provider, the artifacts or Temporal before the check.
    unused: Any = None
    acts = EvaluationActivities(sessions, unused, unused, unused, context_token_cap=16_000)
    target = Target(deployment_id="d/x", provider="openai", model="m", endpoint_ref="env:X")
    suite = Suite(max_context_tokens=4096, context_token_cap=16_000)
    case = CaseInput(
        tenant_id="t", target=target, context_tokens=4096, case_id=suite.cases[0].case_id,
        suite_version="suite-before-this-one",
    )  # fmt: skip
    record = RecordInput(
        evaluation_id="e", tenant_id="t", deployment_id="d/x", context_tokens=4096, results=[],
        suite_version="suite-before-this-one",
    )  # fmt: skip
    env = ActivityEnvironment()
    for step, arg in ((acts.run_case, case), (acts.record, record)):
        with pytest.raises(ApplicationError) as refused:
            await env.run(step, arg)  # type: ignore[arg-type]
        assert refused.value.type == CANNOT_RUN and refused.value.non_retryable
        assert "suite changed" in refused.value.message


async def test_an_embedding_model_goes_through_the_public_lifecycle_to_serving(
    http: httpx.AsyncClient, auth: dict[str, str], upstream: UpstreamServer
) -> None:
    """register → license → evaluate (the embedding check) → approve → /gateway/embed, through
    the API alone. The model's server refuses chat, as OpenAI's does for an embedding model
    (404, "not a chat model"): given the suite's chat cases, its evaluation stopped at the
    first one, and the deployment could never be approved nor routed to."""
    dep, model, profile = "emb/openai", "emb-sim", "emb-openai"
    upstream.state.configure(model, refuses=["chat"])
    await register(
        http, auth, dep, model=model, endpointRef=upstream.endpoint_ref, licenseMetadata=None
    )
    licensed = await http.put(
        f"/factory/model-deployments/{dep}/license",
        json={"commercialUse": True, "licenseName": "apache-2.0"},
        headers=auth,
    )
    assert licensed.status_code == 200, licensed.text
    event = profile_event(profile, [dep], {}, modality="Embedding")
    assert (await publish(http, auth, event)).status_code == 200

    await _evaluate(http, auth, dep, "eval-emb")
    body = await _finished(http, auth, dep)
    assert body["evaluation"]["status"] == "Completed", body["evaluation"]
    assert body["state"] == "Evaluated"
    checked = body["evaluation"]["summary"]["embedding"]
    assert len(checked) == 3 and all(c["passed"] for c in checked.values()), checked
    # The check reached the embeddings endpoint, and no chat case was sent.
    assert upstream.requests(model, "embeddings") == 3
    assert upstream.requests(model, "chat.completions") == 0
    approved = await http.post(f"/factory/model-deployments/{dep}/approve", headers=auth)
    assert approved.status_code == 200 and approved.json()["state"] == "Approved"

    embedded = await http.post(
        "/gateway/embed",
        headers=auth,
        json={"profileId": profile, "inputs": ["a red fruit", "the sky"]},
    )
    assert embedded.status_code == 200, embedded.text
    vectors = embedded.json()["vectors"]
    assert len(vectors) == 2 and len(vectors[0]) == len(vectors[1]) > 0
    assert embedded.json()["receipt"]["deploymentId"] == dep
    assert upstream.requests(model, "embeddings") == 4


async def test_a_second_evaluation_with_the_same_verdicts_is_recorded_as_new_evidence(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    """The evidence reference was the hash of a record holding no evaluation id: a second
    evaluation with the same verdicts made the same reference, which the lifecycle takes for
    a retry of the first and records nothing for: no new scores, evaluatedAt left at the first
    evaluation's, no CapabilityEvidenceRecorded."""
    dep = "eval/again"
    await register(http, auth, dep, model="good-sim", endpointRef=upstream.endpoint_ref)
    seen: list[dict[str, Any]] = []
    for key in ("again-1", "again-2"):
        await _evaluate(http, auth, dep, key)
        body = await _finished(http, auth, dep)
        assert body["evaluation"]["status"] == "Completed", body["evaluation"]
        seen.append(body)
    first, second = seen
    assert first["evaluation"]["evaluationId"] != second["evaluation"]["evaluationId"]
    refs = [b["evaluation"]["evidenceRef"] for b in seen]
    assert refs[0] != refs[1]
    assert [b["evidence"]["evidenceRef"] for b in seen] == refs
    # The same verdicts, measured again: the scores are the second evaluation's.
    assert first["evidence"]["capabilities"].keys() == second["evidence"]["capabilities"].keys()
    for capability, measured in second["evidence"]["capabilities"].items():
        before = first["evidence"]["capabilities"][capability]
        assert (measured["score"], measured["verdict"]) == (before["score"], before["verdict"])
        later = datetime.fromisoformat(measured["evaluatedAt"])
        assert later > datetime.fromisoformat(before["evaluatedAt"]), capability
    async with sessions() as session:
        recorded = (
            await session.scalars(
                select(OutboxEventRow)
                .where(col(OutboxEventRow.tenant_id) == tenant)
                .where(col(OutboxEventRow.aggregate_id) == dep)
                .where(col(OutboxEventRow.event_type) == "CapabilityEvidenceRecorded")
                .order_by(col(OutboxEventRow.position))
            )
        ).all()
    assert [r.payload["evidenceRef"] for r in recorded] == refs
