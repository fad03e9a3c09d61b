"""One suite case driven through the deployment's adapter, its requests sent as the model takes
them, and what a provider's refusal of one of them means.

- Temperature: the suite asks for 0, which OpenAI's reasoning models refuse (400, "only the
  default (1) value is supported"); Anthropic's newest models refuse any. A request refused as
  invalid is sent once more without it; answered then, the model refused the temperature: the
  case goes on without it, and the evaluation is told, so that the cases it schedules next go
  without it too. Which of the request's parameters a refusal names is in the provider's
  words, which differ by provider and change: asking again says it for any provider, at the
  cost of one more refused request (unbilled) for a request that is refused for another reason.
- An optional feature the case tests (`SuiteRequest.optional_features`: structured output, a
  say over parallel tool calls) refused as an invalid request: the model does not offer it,
  and the case is failed. The capability it measures scores what the router's requests asking
  for it would meet; the run goes on.
- Anything else is `raise_unless_unanswered`'s: a plain request refused ends the run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from activities.adapter_pool import AdapterPool
from activities.evaluation_refusals import raise_unless_unanswered, refused_feature
from activities.suite_mapping import to_answer, to_chat
from domain.invocation import Target
from domain.suite import CaseResult, Suite, SuiteAnswer, SuiteRequest, run_case_async
from domain.suite.cases import Case
from providers.errors import ErrorKind, ProviderError


class _Sending:
    """How this case's requests go: with the suite's temperature or not, and the last one sent
    (the one a refusal is of) and whether it carried the temperature."""

    def __init__(self, temperature: bool) -> None:
        self.temperature = temperature
        self.last: SuiteRequest | None = None
        self.last_with_temperature = temperature


async def drive_case(
    suite: Suite,
    case: Case,
    adapters: AdapterPool,
    target: Target,
    tenant_id: str,
    *,
    temperature: bool,
    temperature_refused: Callable[[], Awaitable[None]],
) -> CaseResult:
    """The case's result, its requests sent through `tenant_id`'s client of the deployment.
    `temperature`: whether to send the suite's temperature at first; `temperature_refused` is
    awaited once the model answered a request it had refused with it."""
    sending = _Sending(temperature)

    async def send(request: SuiteRequest, with_temperature: bool) -> SuiteAnswer:
        sending.last, sending.last_with_temperature = request, with_temperature
        async with adapters.lease(target, tenant_id) as adapter:
            chat = to_chat(request, temperature=with_temperature)
            return to_answer(await adapter.complete(chat))

    async def ask(request: SuiteRequest) -> SuiteAnswer:
        if not sending.temperature:
            return await send(request, False)
        try:
            return await send(request, True)
        except ProviderError as exc:
            if exc.kind is not ErrorKind.INVALID_REQUEST:
                raise
        answer = await send(request, False)  # refused again: not the temperature's fault
        sending.temperature = False
        await temperature_refused()
        return answer

    try:
        return await run_case_async(case, ask)
    except ProviderError as exc:
        feature = refused_feature(exc, sending.last)
        if feature is not None:
            return suite.refused(case, feature)
        without = not sending.last_with_temperature
        raise_unless_unanswered(exc, case.case_id, without_temperature=without)
        return suite.unanswered(case)
