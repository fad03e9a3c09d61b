"""What a case is: a deterministic conversation driver with a bounded number of turns.

`start()` gives the first request; `step(history, answer)` takes the request last sent (it
holds the whole conversation) and the model's answer to it, and gives either the next
request (with simulated tool results) or the final `Verdict`. A case keeps no state between
steps: everything is rebuilt from `history`, so a runner may persist it between activities.
Each case also knows the reference answer at every step (`reference`, what a competent model
answers) and a plausible wrong one (`near_miss`), for the oracle and the simulator.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from domain.enums import Capability
from domain.suite.reasons import Failure, Verdict, Vocabulary, Why, fail, render
from domain.suite.types import SuiteAnswer, SuiteRequest, SuiteToolCall

# A case whose first message grows with a parameter (reliable-context) puts its fixed part
# after this mark, so the oracle recognises it whatever the size.
ANCHOR_MARK = "\n\n=== QUESTION ===\n"

# jsonschema keywords appear in schema-violation reasons; they are the validator's, not data.
_BASE_NAMES = (
    "root",
    "arguments",
    *"type enum const required additionalProperties minimum maximum exclusiveMinimum "
    "exclusiveMaximum minLength maxLength pattern minItems maxItems uniqueItems format anyOf "
    "oneOf allOf not multipleOf items prefixItems properties contains minProperties "
    "maxProperties dependentRequired".split(),
)


class Case(ABC):
    case_id: str
    capability: Capability
    max_turns: int = 1

    @abstractmethod
    def start(self) -> SuiteRequest: ...

    @abstractmethod
    def judge(self, history: SuiteRequest, answer: SuiteAnswer) -> SuiteRequest | Failure | None:
        """The next request, or the final outcome: None when the case is passed."""

    @abstractmethod
    def reference(self, request: SuiteRequest) -> SuiteAnswer: ...

    def near_miss(self, request: SuiteRequest) -> SuiteAnswer:
        return self.reference(request)

    def names(self) -> Iterable[str]:
        """Names beyond those in the first request's tools and schema that reasons may show."""
        return ()

    @cached_property
    def first_request(self) -> SuiteRequest:
        return self.start()

    @cached_property
    def vocabulary(self) -> Vocabulary:
        request = self.first_request
        names: list[str] = [*_BASE_NAMES, *self.names()]
        for tool in request.tools:
            names.append(tool.name)
            names += Vocabulary.of_schema(tool.parameters).names
        if request.response_format is not None and request.response_format.json_schema:
            names += Vocabulary.of_schema(request.response_format.json_schema).names
        return Vocabulary(names)

    def recognition_text(self) -> str:
        """The part of the first user message the oracle recognises this case by."""
        return anchor(self.first_request.first_user_text)

    def step(self, history: SuiteRequest, answer: SuiteAnswer) -> SuiteRequest | Verdict:
        if answer.finish_reason == "length":
            return render(fail(Why.TRUNCATED), self.vocabulary)
        if answer.finish_reason == "content_filter":
            return render(fail(Why.FILTERED), self.vocabulary)
        if history.assistant_turns >= self.max_turns:
            return render(fail(Why.TURN_LIMIT, self.max_turns), self.vocabulary)
        outcome = self.judge(history, answer)
        if isinstance(outcome, SuiteRequest):
            return outcome
        return render(outcome, self.vocabulary)


def anchor(text: str) -> str:
    return text.rsplit(ANCHOR_MARK, 1)[-1] if ANCHOR_MARK in text else text


def say(text: str) -> SuiteAnswer:
    return SuiteAnswer(text=text, finish_reason="stop")


def calls(*pairs: tuple[str, Mapping[str, Any] | str], turn: int = 0) -> SuiteAnswer:
    """Tool calls with deterministic ids; a str argument is sent as is (malformed on purpose)."""
    return SuiteAnswer(
        tool_calls=tuple(
            SuiteToolCall(
                id=f"call_{turn}_{i}",
                name=name,
                arguments=args if isinstance(args, str) else json.dumps(args),
            )
            for i, (name, args) in enumerate(pairs)
        ),
        finish_reason="tool_calls",
    )


class SingleTurnCase(Case):
    """One request, one answer, one check."""

    def __init__(
        self,
        case_id: str,
        capability: Capability,
        request: SuiteRequest,
        check: Callable[[SuiteAnswer], Failure | None],
        reference: SuiteAnswer,
        near_miss: SuiteAnswer,
        names: Sequence[str] = (),
    ) -> None:
        self.case_id = case_id
        self.capability = capability
        self._request = request
        self._check = check
        self._reference = reference
        self._near_miss = near_miss
        self._names = tuple(names)

    def start(self) -> SuiteRequest:
        return self._request

    def judge(self, history: SuiteRequest, answer: SuiteAnswer) -> Failure | None:
        return self._check(answer)

    def reference(self, request: SuiteRequest) -> SuiteAnswer:
        return self._reference

    def near_miss(self, request: SuiteRequest) -> SuiteAnswer:
        return self._near_miss

    def names(self) -> Iterable[str]:
        return self._names


def text_only(check: Callable[[str], Failure | None]) -> Callable[[SuiteAnswer], Failure | None]:
    """A check of the answer's text, when a tool call is not what was asked for."""

    def judged(answer: SuiteAnswer) -> Failure | None:
        if answer.tool_calls:
            return fail(Why.UNEXPECTED_TOOL_CALL, answer.tool_calls[0].name)
        return check(answer.text)

    return judged


@dataclass(frozen=True)
class Exchange:
    """One user turn of a scripted conversation: what the user says, how the answer is
    checked, and what a competent model says."""

    user: str
    check: Callable[[str], Failure | None]
    reference: str
