"""The oracle: for any request of the suite, what a competent model answers.

It recognises the case a request belongs to from the request itself, by a fingerprint of
the system prompt and the first user message (for a case whose first message grows with the
context size, only the part after `ANCHOR_MARK`), so it needs no state and works on requests
that went through a wire protocol and back.
"""

from __future__ import annotations

import hashlib

from domain.suite.cases import Case, anchor
from domain.suite.suite import Suite
from domain.suite.types import SuiteAnswer, SuiteRequest


class UnknownRequest(KeyError):
    """The request is not one of the suite's."""


def fingerprint(system: str, first_user_text: str) -> str:
    return hashlib.sha256(f"{system}\x00{first_user_text}".encode()).hexdigest()


class Oracle:
    def __init__(self, suite: Suite) -> None:
        self._cases: dict[str, Case] = {}
        for case in suite.cases:
            key = fingerprint(case.first_request.system, case.recognition_text())
            if key in self._cases:
                raise ValueError(f"{case.case_id} starts like {self._cases[key].case_id}")
            self._cases[key] = case

    def case_for(self, request: SuiteRequest) -> Case | None:
        text = request.first_user_text
        for candidate in dict.fromkeys((text, anchor(text))):
            case = self._cases.get(fingerprint(request.system, candidate))
            if case is not None:
                return case
        return None

    def _case(self, request: SuiteRequest) -> Case:
        case = self.case_for(request)
        if case is None:
            raise UnknownRequest("not a request of this suite")
        return case

    def answer(self, request: SuiteRequest) -> SuiteAnswer:
        return self._case(request).reference(request)

    def near_miss(self, request: SuiteRequest) -> SuiteAnswer:
        """A plausible wrong answer: wrong tool, extra argument, JSON of the wrong shape, a
        patch that applies but fails its check, a forgotten fact..."""
        return self._case(request).near_miss(request)
