"""EvaluateDeployment's steps: prepare the suite (or a fixed check) for a deployment, drive one
case through its real adapter, record the outcome (artifact by hash + evidence through the
lifecycle), or say why the run could not complete. Case texts and model outputs stay inside
`run_case` and the checks.

A record's file is written off the event loop and within a bound (store/artifact_files.py), as
the answers' are: written on the loop, an artifact volume gone quiet froze the whole worker
process (webhook polls' heartbeats, receipt closes, lifecycle steps) for as long as it stalled.
Now only the record step waits, at most the files' wait, and fails to be retried by its policy."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import partial

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from activities.adapter_pool import AdapterPool
from activities.evaluation_cases import drive_case
from activities.evaluation_checks import embedding_check, rerank_check
from activities.evaluation_refusals import (
    CANNOT_RUN,
    evaluable,
    evaluated_through,
    ready,
    same_suite,
)
from activities.evaluation_rows import listing_of, readable
from activities.evaluation_types import (
    TEMPERATURE_REFUSED,
    CaseInput,
    Check,
    EvaluationInput,
    FailInput,
    Prepared,
    RecordInput,
    RerankInput,
    RerankRecordInput,
)
from activities.lifecycle_client import LifecycleClient, LifecycleClosed, LifecycleRefused
from activities.lifecycle_types import ROW_UNREADABLE
from domain.approval import evidence_refusals
from domain.deployments import (
    CapabilityMeasurement,
    DeploymentRecord,
    EvidenceInput,
)
from domain.enums import Modality
from domain.hashing import canonical_json
from domain.invocation import Target
from domain.lifecycle import Transition
from domain.suite import SUITE_VERSION, CaseResult, Suite
from domain.suite.checks import CheckResult
from domain.suite.embedding import EMBEDDING_CAPABILITY, EMBEDDING_CASES, embedding_passed
from domain.suite.rerank import RERANK_CAPABILITY, RERANK_CASES, rerank_passed
from store import evaluations
from store.artifact_files import ArtifactFiles, VolumeStalled
from store.artifacts import reference
from store.db import transaction
from store.outage import is_outage
from store.repositories import ModelDeploymentRepository, ModelProfileRepository
from store.tables import ModelDeploymentRow
from store.views import deployment_record

log = logging.getLogger("model_router.evaluation")


class EvaluationActivities:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        adapters: AdapterPool,
        artifacts: ArtifactFiles,
        client: Callable[[], Awaitable[Client]],
        context_token_cap: int,
        lifecycle_queue: str | None = None,
    ) -> None:
        # Where the lifecycle workflows run, for one started again (LifecycleClient's
        # `resume`): None, this activity's own queue (the worker runs both on one queue).
        self._lifecycle_queue = lifecycle_queue
        self._sessions = sessions
        self._adapters = adapters
        self._artifacts = artifacts
        self._client = client
        self._cap = context_token_cap
        self._suites: dict[int, Suite] = {}

    def _suite(self, context_tokens: int) -> Suite:
        if context_tokens not in self._suites:
            self._suites[context_tokens] = Suite(
                max_context_tokens=context_tokens, context_token_cap=self._cap
            )
        return self._suites[context_tokens]

    @activity.defn(name="evaluation_prepare")
    async def prepare(self, data: EvaluationInput) -> Prepared:
        async with self._sessions() as session:
            row = await ModelDeploymentRepository(session, data.tenant_id).get(data.deployment_id)
            profiles = await ModelProfileRepository(session, data.tenant_id).list_active()
        # Retired since the API accepted the request, or its row no longer reads: no case is
        # sent to the provider.
        row = readable(evaluable(row))
        listing = [p for p in profiles if data.deployment_id in p.allowed_deployments]
        only = {p.modality for p in listing}
        modality = Modality.RERANK if only == {Modality.RERANK} else None
        if evaluated_through(row.provider, modality) == "rerank":
            # A reranker: the rerank check's cases, through the rerank adapter.
            return self._check(row, "rerank", Modality.RERANK)
        if only == {Modality.EMBEDDING}:
            # An embedding model, which refuses chat (OpenAI: 404, "not a chat model"): the
            # embedding check's cases, through the embeddings endpoint. Listed by a Chat
            # profile as well, it is evaluated as a chat model (the suite's first case says
            # whether it is one).
            evaluated_through(row.provider, Modality.EMBEDDING)
            return self._check(row, "embedding", Modality.EMBEDDING)
        # Reliable context is measured up to what the listing profiles need (capped for cost).
        wanted = max((p.max_context_tokens for p in listing), default=8192)
        suite = self._suite(max(1024, min(wanted, self._cap)))
        return Prepared(
            target=Target(
                deployment_id=row.deployment_id,
                provider=row.provider,
                model=row.model,
                endpoint_ref=row.endpoint_ref,
            ),
            context_tokens=suite.context_tokens,
            suite_version=suite.suite_version,
            case_ids=[c.case_id for c in suite.cases],
            capability_of={c.case_id: c.capability.value for c in suite.cases},
        )

    @staticmethod
    def _check(row: ModelDeploymentRow, check: Check, modality: Modality) -> Prepared:
        cases, label = (
            ([c.case_id for c in RERANK_CASES], RERANK_CAPABILITY)
            if check == "rerank"
            else ([c.case_id for c in EMBEDDING_CASES], EMBEDDING_CAPABILITY)
        )
        return Prepared(
            target=Target(
                deployment_id=row.deployment_id,
                provider=row.provider,
                model=row.model,
                endpoint_ref=row.endpoint_ref,
                modality=modality,
            ),
            context_tokens=0,
            suite_version=SUITE_VERSION,
            case_ids=cases,
            capability_of=dict.fromkeys(cases, label),
            kind=check,
        )

    async def _stillevaluable(self, tenant_id: str, deployment_id: str) -> None:
        """Each case asks first: a deployment retired while its evaluation runs stops the
        cases not yet sent (one primary-key read each, against a provider call), where every
        case went on to the provider for evidence the import then refused. A store that does
        not answer does not stop the case: the import refuses a Retired deployment anyway, and
        an outage longer than a case's retries failed the whole evaluation."""
        try:
            async with self._sessions() as session:
                row = await ModelDeploymentRepository(session, tenant_id).get(deployment_id)
        except Exception as exc:
            if not is_outage(exc):
                raise
            log.warning("evaluation case: the store did not answer (%s)", type(exc).__name__)
            return
        readable(evaluable(row))

    @activity.defn(name="evaluation_run_case")
    async def run_case(self, data: CaseInput) -> CaseResult:
        suite = same_suite(self._suite(data.context_tokens), data.suite_version)
        case = suite.case(data.case_id)
        await self._stillevaluable(data.tenant_id, data.target.deployment_id)
        await ready(self._adapters, data.target, data.tenant_id)
        try:
            return await drive_case(
                suite,
                case,
                self._adapters,
                data.target,
                data.tenant_id,
                temperature=data.temperature,
                temperature_refused=self._temperature_refused,
            )
        except ApplicationError:
            raise
        except Exception as exc:
            # Retried as any failure is, but named by its type alone: an exception's message
            # may quote the answer, and it would go into the history, the spans and, once the
            # evaluation fails, its stored reason on the console.
            raise ApplicationError(f"the case could not be run ({type(exc).__name__})") from None

    async def _temperature_refused(self) -> None:
        """Tells the case's evaluation that the model refused the suite's temperature: the
        cases it schedules next go without it. Not heard (Temporal away), each later case
        finds it out for itself, at one refused request more."""
        workflow_id = activity.info().workflow_id
        if workflow_id is None:
            return
        try:
            client = await self._client()
            await client.get_workflow_handle(workflow_id).signal(TEMPERATURE_REFUSED)
        except Exception as exc:
            log.warning("evaluation case: the run was not told (%s)", type(exc).__name__)

    # Named for the rerank check, the first of the fixed checks: the worker registers these
    # two steps by name, and the histories under way name them.
    @activity.defn(name="evaluation_rerank")
    async def rerank(self, data: RerankInput) -> list[CheckResult]:
        """A fixed check's cases (a handful of small requests): the rerank check against a
        reranker, the embedding check against an embedding model."""
        await self._stillevaluable(data.tenant_id, data.target.deployment_id)
        await ready(self._adapters, data.target, data.tenant_id)
        async with self._adapters.lease(data.target, data.tenant_id) as adapter:
            if data.check == "embedding":
                return await embedding_check(adapter)
            return await rerank_check(adapter)

    @activity.defn(name="evaluation_record_rerank")
    async def record_rerank(self, data: RerankRecordInput) -> str:
        """Stores the check's record; imports it as evidence (no capability scores) only when
        every case passed, otherwise the evaluation fails naming the cases."""
        record = canonical_json(
            {
                "suiteVersion": SUITE_VERSION,
                "check": data.check,
                # Each evaluation's record is its own, so its evidence is new evidence even
                # when its verdicts are those of the last one (the lifecycle records a
                # reference once); a retry of this step writes the same record again.
                "evaluationId": data.evaluation_id,
                "deploymentId": data.deployment_id,
                "results": [r.model_dump(mode="json") for r in data.results],
            }
        )
        evidence_ref = await self._store_record(data.tenant_id, record)
        passed = embedding_passed if data.check == "embedding" else rerank_passed
        if not passed(data.results):
            failed = [f"{r.case_id}: {r.reason}" for r in data.results if not r.passed]
            raise ApplicationError(
                f"the deployment failed the {data.check} check (" + "; ".join(failed) + ")",
                type=CANNOT_RUN,
                non_retryable=True,
            )
        await self._import_evidence(data.tenant_id, data.deployment_id, evidence_ref, {})
        summary = {
            "scores": {},
            data.check: {r.case_id: {"passed": r.passed, "reason": r.reason} for r in data.results},
            "shortfalls": [],
        }
        async with transaction(self._sessions) as session:
            await evaluations.complete(
                session, data.evaluation_id, evidence_ref, summary, SUITE_VERSION
            )
        return evidence_ref

    async def _store_record(self, tenant_id: str, record: bytes) -> str:
        """The record written under its reference, off the loop. A volume that did not answer
        within the wait (or is known to be stalled) fails the step, retried by its policy
        (RECORD_RETRY): named for what went wrong, not the volume's path."""
        ref = reference(record)
        try:
            await self._artifacts.write(tenant_id, ref, record)
        except VolumeStalled as exc:
            raise ApplicationError(
                f"the evaluation record was not stored: {exc}", type=type(exc).__name__
            ) from None
        return ref

    async def _import_evidence(
        self,
        tenant_id: str,
        deployment_id: str,
        evidence_ref: str,
        scores: dict[str, CapabilityMeasurement],
    ) -> None:
        evidence = EvidenceInput(
            evidence_ref=evidence_ref,
            suite_version=SUITE_VERSION,
            evaluated_at=datetime.now(UTC),
            scores=scores,
        )
        lifecycle = LifecycleClient(await self._client())
        try:
            await lifecycle.transition(
                tenant_id,
                deployment_id,
                Transition.RECORD_EVIDENCE,
                evidence,
                # A lifecycle whose workflow is gone (terminated by hand, a cluster restored
                # without its histories) is started again from the stored row, so the evidence
                # the suite paid for lands; without, it failed as "retired" after every case.
                resume=(
                    self._lifecycle_queue or activity.info().task_queue,
                    partial(self._stored, tenant_id, deployment_id),
                ),
            )
        except LifecycleRefused as exc:
            # The deployment's own row not read (corrupted during the run): pydantic's message
            # quotes the stored values, so it is not the reason.
            said = (
                "the deployment's stored record does not read: correct the row, then evaluate again"
                if exc.kind == ROW_UNREADABLE
                else exc.message
            )
            raise ApplicationError(
                f"evidence not recorded: {said}", type=CANNOT_RUN, non_retryable=True
            ) from None
        except LifecycleClosed:
            # Not started again: the row says Retired (or is gone), so the lifecycle ended
            # while the suite ran.
            raise ApplicationError(
                "evidence not recorded: the deployment was retired during the evaluation",
                type=CANNOT_RUN,
                non_retryable=True,
            ) from None

    async def _stored(self, tenant_id: str, deployment_id: str) -> DeploymentRecord | None:
        async with self._sessions() as session:
            row = await ModelDeploymentRepository(session, tenant_id).get(deployment_id)
        # A row that does not read cannot be the lifecycle's record: CannotRun, not retried.
        return deployment_record(readable(row)) if row is not None else None

    @activity.defn(name="evaluation_record")
    async def record(self, data: RecordInput) -> str:
        suite = same_suite(self._suite(data.context_tokens), data.suite_version)
        scores = suite.score(data.results)
        record = canonical_json(
            {
                "suiteVersion": suite.suite_version,
                # As the checks' record: each evaluation's evidence is its own.
                "evaluationId": data.evaluation_id,
                "deploymentId": data.deployment_id,
                "contextTokens": data.context_tokens,
                "temperatureRefused": data.temperature_refused,
                "results": [r.model_dump(mode="json") for r in data.results],
                "scores": {c.value: [s.pass_rate, s.verdict] for c, s in scores.items()},
            }
        )
        evidence_ref = await self._store_record(data.tenant_id, record)
        measured = {c.value: s.pass_rate for c, s in scores.items()}
        await self._import_evidence(
            data.tenant_id,
            data.deployment_id,
            evidence_ref,
            {
                c.value: CapabilityMeasurement(score=s.pass_rate, verdict=s.verdict)
                for c, s in scores.items()
            },
        )
        async with transaction(self._sessions) as session:
            profiles = await ModelProfileRepository(session, data.tenant_id).list_active()
            listing, unreadable = listing_of(profiles, data.deployment_id)
            shortfalls = evidence_refusals(measured, listing) + unreadable
            await evaluations.complete(
                session,
                data.evaluation_id,
                evidence_ref,
                {
                    "scores": {
                        c.value: {"score": s.pass_rate, "verdict": s.verdict}
                        for c, s in scores.items()
                    },
                    # Profiles the deployment no longer qualifies for: the router stops choosing
                    # it there, and the operator sees it here.
                    "shortfalls": [
                        r.model_dump(by_alias=True, exclude_none=True) for r in shortfalls
                    ],
                    # The model refused the suite's temperature 0: cases went with its default,
                    # their answers less repeatable.
                    "temperatureRefused": data.temperature_refused,
                },
                suite.suite_version,
            )
        return evidence_ref

    @activity.defn(name="evaluation_fail")
    async def fail(self, data: FailInput) -> None:
        async with transaction(self._sessions) as session:
            await evaluations.fail(session, data.tenant_id, data.evaluation_id, data.reason)
