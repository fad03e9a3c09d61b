"""Why an evaluation cannot run (CannotRun, not retried: the deployment stays as it was and the
evaluation says why), and what a provider's failure of one case means to the run: a refusal
of the evaluation or of the case's plain request ends it, a refusal of an optional feature the
case tests (`refused_feature`) is the case failed, an outage is retried after the provider's
Retry-After, a context too long is the case failed. Reasons name kinds and statuses, never a
provider's words."""

from __future__ import annotations

from datetime import timedelta

from temporalio.exceptions import ApplicationError

from activities.adapter_pool import AdapterPool
from activities.secret_policy import KeptForOtherTenants
from domain.enums import Modality
from domain.invocation import Target
from domain.lifecycle import can_evaluate
from domain.suite import Suite, SuiteRequest
from providers.errors import ErrorKind, ProviderError, too_large_for_limit
from providers.registry import adapter_kind
from providers.secrets import SecretResolutionError
from store.tables import ModelDeploymentRow

CANNOT_RUN = "CannotRun"
# A provider that refuses the credentials, or does not know the model, will not do better on a
# retry: the run stops and the operator is told. Other refusals are the model failing a case.
# So is a request larger than the deployment's whole tokens-per-minute limit, though read as
# quota (providers/errors.too_large_for_limit): a context case sized past a low tier's limit.
_FATAL = {ErrorKind.AUTH, ErrorKind.NOT_FOUND, ErrorKind.UNSUPPORTED, ErrorKind.QUOTA}
# A provider that refuses a case's plain request (a server option not enabled, a content filter
# tripping on the suite's benign text) has not answered it wrongly: scored as the model's
# failure, every such case made an all-zero scorecard that moved the deployment to Evaluated on
# evidence of nothing. The first refusal ends the run, naming the kind and the case: no
# threshold, because refusals below one would still be recorded as wrong answers, and the cases
# after it would most likely be refused as well. Two refusals are not the request's fault and
# do not end it (activities/evaluation_cases.py): the suite's temperature 0, which OpenAI's
# reasoning models refuse (the request is sent again without it), and an optional feature the
# case tests (structured output, parallel tool calls), which a model without it refuses: that
# is the model failing the case, what the router's requests asking for it would meet. A
# context-length refusal is not among them either: the reliable-context cases are sized to
# what the listing profiles need, and a deployment whose window is smaller fails those cases,
# as the router would fail those requests.
_REFUSED = {ErrorKind.INVALID_REQUEST, ErrorKind.CONTENT_POLICY}
# The longest a provider's Retry-After defers a case's next attempt: one that asks for longer
# (or for hours) is tried again after this, and fails the run if it still refuses.
RETRY_AFTER_CAP_SECONDS = 60.0


def evaluable(row: ModelDeploymentRow | None) -> ModelDeploymentRow:
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


async def ready(adapters: AdapterPool, target: Target, tenant_id: str) -> None:
    """`tenant_id`'s deployment's credentials resolve, or the evaluation cannot run at all."""
    try:
        await adapters.ready(target, tenant_id)
    except SecretResolutionError as exc:
        # Missing, or kept for other tenants since registration: said apart, neither names a
        # secret nor the tenants a reference is kept for.
        why = (
            "are kept for other tenants" if isinstance(exc, KeptForOtherTenants) else "are missing"
        )
        raise ApplicationError(
            f"credentials for endpointRef {target.endpoint_ref} {why}",
            type=CANNOT_RUN,
            non_retryable=True,
        ) from None


def same_suite(suite: Suite, prepared: str | None) -> Suite:
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


def evaluated_through(provider: str, modality: Modality | None) -> str:
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


# The words a refusal of each optional feature names it by, on OpenAI's wire and Anthropic's
# (its structured output is `output_config`; it is told of parallel tool use only to turn it
# off). Matched in the provider's reason, which goes no further than this test.
_FEATURE_WORDS = {
    "response_format": ("response_format", "output_config", "output_format", "structured output"),
    "parallel_tool_calls": ("parallel_tool_calls", "disable_parallel_tool_use", "parallel tool"),
}


def refused_feature(exc: ProviderError, request: SuiteRequest | None) -> str | None:
    """The optional feature of the refused `request` the refusal names (the case is then
    failed), or None: the request was plain, the refusal is not an invalid request (a content
    filter's is about the text, whatever the request asks for), or it names none of the
    request's features. Taken for the feature's whatever it said, a refusal of ours (a schema a
    provider's strict mode rejects, a tool our adapter converted wrongly) lowered the
    capability's score, where it used to end the run with its cause in view; and on Anthropic,
    which is never sent `parallel_tool_calls`, it blamed a parameter not in the request."""
    if exc.kind is not ErrorKind.INVALID_REQUEST or request is None:
        return None
    said = (exc.reason or "").lower()
    return next(
        (
            feature
            for feature in request.optional_features
            if any(word in said for word in _FEATURE_WORDS.get(feature, (feature,)))
        ),
        None,
    )


def raise_unless_unanswered(
    exc: ProviderError, case_id: str, *, without_temperature: bool = False
) -> None:
    """A provider that refuses the evaluation, or a case's request, ends it; one that is
    unavailable is retried by the workflow's policy, after the provider's Retry-After when it
    gave one (past the policy, the run cannot run); a context-length refusal leaves the case
    unanswered, which its verifier scores. Reasons name the error's kind and status, never
    the provider's message (it may quote the request). `without_temperature`: the refused
    request carried none (the suite's temperature is not the cause)."""
    if exc.kind in _FATAL and not too_large_for_limit(exc):
        raise ApplicationError(
            f"provider refused the evaluation ({exc.kind.value})",
            type=CANNOT_RUN,
            non_retryable=True,
        ) from None
    if exc.kind in _REFUSED:
        status = f", status {exc.status_code}" if exc.status_code is not None else ""
        sent = " sent without temperature" if without_temperature else ""
        raise ApplicationError(
            f"provider refused the request of case {case_id} ({exc.kind.value}{status}){sent}: "
            "a refused request is not a wrong answer; correct the deployment, then evaluate "
            "again",
            type=CANNOT_RUN,
            non_retryable=True,
        ) from None
    if exc.transient:
        raise ApplicationError(
            f"provider unavailable ({exc.kind.value})", next_retry_delay=retry_delay(exc)
        ) from None


def retry_delay(exc: ProviderError) -> timedelta | None:
    """When to try the case again, as the provider asked (bounded); None: the policy's backoff.
    Retried at 1, 2 and 4 s whatever it asked, a rate-limited case failed the run within 7 s
    where waiting as told would have had it answered."""
    if exc.retry_after is None or exc.retry_after <= 0:
        return None
    return timedelta(seconds=min(exc.retry_after, RETRY_AFTER_CAP_SECONDS))
