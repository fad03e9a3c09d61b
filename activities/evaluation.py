"""EvaluateDeployment's steps: prepare the suite for a deployment, drive one case through its
real adapter, record the outcome (artifact by hash + evidence through the lifecycle), or say why
the run could not complete. Case texts and model outputs stay inside `run_case`."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from functools import partial

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from activities.adapter_pool import AdapterPool
from activities.evaluation_types import (
    CaseInput,
    EvaluationInput,
    FailInput,
    Prepared,
    RecordInput,
    RerankInput,
    RerankRecordInput,
)
from activities.lifecycle_client import LifecycleClient, LifecycleClosed, LifecycleRefused
from activities.suite_mapping import to_answer, to_chat
from domain.approval import evidence_refusals
from domain.deployments import CapabilityMeasurement, DeploymentRecord, EvidenceInput
from domain.enums import Modality
from domain.hashing import canonical_json
from domain.invocation import Target
from domain.lifecycle import Transition, can_evaluate
from domain.profiles import ModelProfile
from domain.suite import (
    SUITE_VERSION,
    CaseResult,
    Suite,
    SuiteAnswer,
    SuiteRequest,
    run_case_async,
)
from domain.suite.rerank import (
    RERANK_CAPABILITY,
    RERANK_CASES,
    RerankCaseResult,
    rerank_passed,
    verify_rerank,
)
from providers.errors import ErrorKind, ProviderError
from providers.registry import adapter_kind
from providers.secrets import SecretResolutionError
from store import evaluations
from store.artifacts import ArtifactStore
from store.db import transaction
from store.outage import is_outage
from store.repositories import ModelDeploymentRepository, ModelProfileRepository
from store.tables import ModelDeploymentRow
from store.views import deployment_record

log = logging.getLogger("model_router.evaluation")
CANNOT_RUN = "CannotRun"
# A provider that refuses the credentials, or does not know the model, will not do better on a
# retry: the run stops and the operator is told. Other refusals are the model failing a case.
_FATAL = {ErrorKind.AUTH, ErrorKind.NOT_FOUND, ErrorKind.UNSUPPORTED, ErrorKind.QUOTA}
# A provider that refuses a case's request (a parameter the model does not take, such as a
# reasoning model's 400 to `temperature: 0`; a feature its server has not enabled; a content
# filter tripping on the suite's benign text) has not answered it wrongly: scored as the model's
# failure, every such case made an all-zero scorecard that moved the deployment to Evaluated on
# evidence of nothing. The first refusal ends the run, naming the kind and the case: no
# threshold, because refusals below one would still be recorded as wrong answers, and the cases
# after it would most likely be refused as well. A context-length refusal is not among them:
# the reliable-context cases are sized to what the listing profiles need, and a deployment
# whose window is smaller fails those cases, as the router would fail those requests.
_REFUSED = {ErrorKind.INVALID_REQUEST, ErrorKind.CONTENT_POLICY}
# The longest a provider's Retry-After defers a case's next attempt: one that asks for longer
# (or for hours) is tried again after this, and fails the run if it still refuses.
RETRY_AFTER_CAP_SECONDS = 60.0


class EvaluationActivities:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        adapters: AdapterPool,
        artifacts: ArtifactStore,
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
        # Retired since the API accepted the request: no case is sent to the provider.
        row = _evaluable(row)
        listing = [p for p in profiles if data.deployment_id in p.allowed_deployments]
        modality = (
            Modality.RERANK
            if listing and all(p.modality is Modality.RERANK for p in listing)
            else None
        )
        if _adapter_kind(row.provider, modality) == "rerank":
            # A reranker: the rerank check's cases, through the rerank adapter.
            return Prepared(
                target=Target(
                    deployment_id=row.deployment_id,
                    provider=row.provider,
                    model=row.model,
                    endpoint_ref=row.endpoint_ref,
                    modality=Modality.RERANK,
                ),
                context_tokens=0,
                suite_version=SUITE_VERSION,
                case_ids=[c.case_id for c in RERANK_CASES],
                capability_of={c.case_id: RERANK_CAPABILITY for c in RERANK_CASES},
                kind="rerank",
            )
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

    async def _still_evaluable(self, tenant_id: str, deployment_id: str) -> None:
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
        _evaluable(row)

    @activity.defn(name="evaluation_run_case")
    async def run_case(self, data: CaseInput) -> CaseResult:
        suite = _same(self._suite(data.context_tokens), data.suite_version)
        case = suite.case(data.case_id)
        await self._still_evaluable(data.tenant_id, data.target.deployment_id)
        await _ready(self._adapters, data.target)

        async def ask(request: SuiteRequest) -> SuiteAnswer:
            async with self._adapters.lease(data.target) as adapter:
                return to_answer(await adapter.complete(to_chat(request)))

        try:
            return await run_case_async(case, ask)
        except ProviderError as exc:
            _raise_unless_unanswered(exc, case.case_id)
            return suite.unanswered(case)
        except ApplicationError:
            raise
        except Exception as exc:
            # Retried as any failure is, but named by its type alone: an exception's message
            # may quote the answer, and it would go into the history, the spans and, once the
            # evaluation fails, its stored reason on the console.
            raise ApplicationError(f"the case could not be run ({type(exc).__name__})") from None

    @activity.defn(name="evaluation_rerank")
    async def rerank(self, data: RerankInput) -> list[RerankCaseResult]:
        """The rerank check's cases against a reranker (a handful of small requests)."""
        await self._still_evaluable(data.tenant_id, data.target.deployment_id)
        await _ready(self._adapters, data.target)
        results = []
        async with self._adapters.lease(data.target) as adapter:
            for case in RERANK_CASES:
                try:
                    answer = await adapter.rerank(case.query, case.documents, top_n=case.top_n)
                except ProviderError as exc:
                    _raise_unless_unanswered(exc, case.case_id)
                    results.append(
                        RerankCaseResult(case_id=case.case_id, passed=False, reason="no answer")
                    )
                    continue
                ranked = [(item.index, item.relevance_score) for item in answer.results]
                results.append(verify_rerank(case, ranked))
        return results

    @activity.defn(name="evaluation_record_rerank")
    async def record_rerank(self, data: RerankRecordInput) -> str:
        """Stores the check's record; imports it as evidence (no capability scores) only when
        every case passed, otherwise the evaluation fails naming the cases."""
        record = canonical_json(
            {
                "suiteVersion": SUITE_VERSION,
                "check": "rerank",
                "deploymentId": data.deployment_id,
                "results": [r.model_dump(mode="json") for r in data.results],
            }
        )
        evidence_ref = self._artifacts.put(data.tenant_id, record)
        if not rerank_passed(data.results):
            failed = [f"{r.case_id}: {r.reason}" for r in data.results if not r.passed]
            raise ApplicationError(
                "the deployment failed the rerank check (" + "; ".join(failed) + ")",
                type=CANNOT_RUN,
                non_retryable=True,
            )
        await self._import_evidence(data.tenant_id, data.deployment_id, evidence_ref, {})
        summary = {
            "scores": {},
            "rerank": {r.case_id: {"passed": r.passed, "reason": r.reason} for r in data.results},
            "shortfalls": [],
        }
        async with transaction(self._sessions) as session:
            await evaluations.complete(session, data.evaluation_id, evidence_ref, summary)
        return evidence_ref

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
            raise ApplicationError(
                f"evidence not recorded: {exc.message}", type=CANNOT_RUN, non_retryable=True
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
        return deployment_record(row) if row is not None else None

    @activity.defn(name="evaluation_record")
    async def record(self, data: RecordInput) -> str:
        suite = _same(self._suite(data.context_tokens), data.suite_version)
        scores = suite.score(data.results)
        record = canonical_json(
            {
                "suiteVersion": suite.suite_version,
                "deploymentId": data.deployment_id,
                "contextTokens": data.context_tokens,
                "results": [r.model_dump(mode="json") for r in data.results],
                "scores": {c.value: [s.pass_rate, s.verdict] for c, s in scores.items()},
            }
        )
        evidence_ref = self._artifacts.put(data.tenant_id, record)
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
            listing = [
                ModelProfile.model_validate(p)
                for p in profiles
                if data.deployment_id in p.allowed_deployments
            ]
            shortfalls = evidence_refusals(measured, listing)
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
                },
            )
        return evidence_ref

    @activity.defn(name="evaluation_fail")
    async def fail(self, data: FailInput) -> None:
        async with transaction(self._sessions) as session:
            await evaluations.fail(session, data.tenant_id, data.evaluation_id, data.reason)


def _evaluable(row: ModelDeploymentRow | None) -> ModelDeploymentRow:
    """The deployment, when it exists in a state whose evidence can be recorded; otherwise
    CannotRun."""
    if row is None:
        raise ApplicationError("deployment not found", type=CANNOT_RUN, non_retryable=True)
    if not can_evaluate(row.state):
        raise ApplicationError(
            f"the deployment is {row.state.value}; it cannot be evaluated",
            type=CANNOT_RUN,
            non_retryable=True,
        )
    return row


async def _ready(adapters: AdapterPool, target: Target) -> None:
    """The deployment's credentials resolve, or the evaluation cannot run at all."""
    try:
        await adapters.ready(target)
    except SecretResolutionError:
        raise ApplicationError(
            f"credentials for endpointRef {target.endpoint_ref} are missing",
            type=CANNOT_RUN,
            non_retryable=True,
        ) from None


def _same(suite: Suite, prepared: str | None) -> Suite:
    """This worker's suite, if it is the one the evaluation was prepared with. A deploy that
    changed the suite mid-evaluation raised KeyError on a removed case (retried to failure),
    or recorded evidence from two suites under the new one's version."""
    if prepared is not None and suite.suite_version != prepared:
        raise ApplicationError(
            f"the capability suite changed during the evaluation ({prepared} → "
            f"{suite.suite_version}): evaluate again",
            type=CANNOT_RUN,
            non_retryable=True,
        )
    return suite


def _adapter_kind(provider: str, modality: Modality | None) -> str:
    """The adapter the deployment is evaluated through; CannotRun for a provider none serves
    (registration takes any provider name). Raised as the adapter's ProviderError, it was
    retried for good, the evaluation Running for ever and every later one of the deployment
    a 409."""
    try:
        return adapter_kind(provider, modality)
    except ProviderError as exc:
        raise ApplicationError(
            f"no adapter serves provider {provider!r} ({exc.kind.value}): register the "
            "deployment with a supported provider",
            type=CANNOT_RUN,
            non_retryable=True,
        ) from None


def _raise_unless_unanswered(exc: ProviderError, case_id: str) -> None:
    """A provider that refuses the evaluation, or a case's request, ends it; one that is
    unavailable is retried by the workflow's policy, after the provider's Retry-After when it
    gave one (past the policy, the run cannot run); a context-length refusal leaves the case
    unanswered, which its verifier scores. Reasons name the error's kind and status, never
    the provider's message (it may quote the request)."""
    if exc.kind in _FATAL:
        raise ApplicationError(
            f"provider refused the evaluation ({exc.kind.value})",
            type=CANNOT_RUN,
            non_retryable=True,
        ) from None
    if exc.kind in _REFUSED:
        status = f", status {exc.status_code}" if exc.status_code is not None else ""
        raise ApplicationError(
            f"provider refused the request of case {case_id} ({exc.kind.value}{status}): "
            "a refused request is not a wrong answer; correct the deployment, then evaluate "
            "again",
            type=CANNOT_RUN,
            non_retryable=True,
        ) from None
    if exc.transient:
        raise ApplicationError(
            f"provider unavailable ({exc.kind.value})", next_retry_delay=_retry_delay(exc)
        ) from None


def _retry_delay(exc: ProviderError) -> timedelta | None:
    """When to try the case again, as the provider asked (bounded); None: the policy's backoff.
    Retried at 1, 2 and 4 s whatever it asked, a rate-limited case failed the run within 7 s
    where waiting as told would have had it answered."""
    if exc.retry_after is None or exc.retry_after <= 0:
        return None
    return timedelta(seconds=min(exc.retry_after, RETRY_AFTER_CAP_SECONDS))
