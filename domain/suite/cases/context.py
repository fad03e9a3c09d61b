"""reliable-context: facts planted at several depths of a long, deterministic document are
retrieved, with a similar-looking distractor planted elsewhere.

The document is sized from the context window under test: `context_tokens` (the profile's
maxContextTokens, capped for cost by the suite). Tokens are *estimated* as len(text) / 4,
the usual figure for English text; RESERVE_TOKENS are left for the system prompt and the
question, and the answer's allowance besides, so the request (its prompt and the output it
allows) stays under the window it tests.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from functools import cached_property

from domain.enums import Capability
from domain.suite.cases.base import ANCHOR_MARK, Case, say
from domain.suite.reasons import Failure, Why, fail
from domain.suite.types import SuiteAnswer, SuiteRequest, user
from domain.suite.verifiers.text import check_answer

CHARS_PER_TOKEN = 4
RESERVE_TOKENS = 512
MIN_CONTEXT_TOKENS = 2 * RESERVE_TOKENS
# The answer's allowance: the suite's own for every case (SuiteRequest's default). A reasoning
# model spends its reasoning from it before the code it answers with: at 64, OpenAI's
# reasoning models ended with an empty answer cut at the limit, and failed these cases on a
# question they had answered. A model needing more than this fails the suite's other cases
# too.
ANSWER_TOKENS = 1024


def answer_tokens(context_tokens: int) -> int:
    """The answer's allowance in a window: ANSWER_TOKENS, but never more than a quarter of a
    small window, which the document needs (at MIN_CONTEXT_TOKENS it is left a quarter)."""
    return min(ANSWER_TOKENS, context_tokens // 4)


SYSTEM = "You answer questions about long documents precisely, from the document only."

_WORDS = (
    "the a river market morning engineer quiet report village harbour green station people "
    "winter road bridge ledger north south east west small large old new early late council "
    "garden library train window storm field clock letter merchant baker teacher painter "
    "hill valley forest meadow stone copper silver wooden narrow broad busy calm distant "
    "nearby walked noted carried repaired opened closed counted measured painted visited "
    "described recorded during after before beside under across through along near with "
    "without every several many few most some each other second third fourth annual weekly "
    "summer autumn spring evening afternoon lantern orchard mill canal tower square street"
).split()
_CODE = re.compile(r"\b[0-9]{4}-[a-z]{2}\b", re.IGNORECASE)


def _stream(seed: str) -> Iterable[int]:
    counter = 0
    while True:
        yield from hashlib.sha256(f"{seed}:{counter}".encode()).digest()
        counter += 1


def filler_sentences(seed: str, chars: int) -> list[str]:
    """Plausible, varied, deterministic sentences totalling about `chars` characters."""
    numbers = iter(_stream(seed))
    sentences: list[str] = []
    total = 0
    while total < chars:
        length = 8 + next(numbers) % 9
        words = [_WORDS[(next(numbers) << 8 | next(numbers)) % len(_WORDS)] for _ in range(length)]
        sentence = " ".join(words).capitalize() + "."
        sentences.append(sentence)
        total += len(sentence) + 1
    return sentences


def document(seed: str, chars: int, planted: Sequence[tuple[float, str]]) -> str:
    """Filler with each (depth, sentence) inserted at that fraction of the text."""
    sentences = filler_sentences(seed, chars)
    offsets, total = [], 0
    for sentence in sentences:
        offsets.append(total)
        total += len(sentence) + 1
    for depth, fact in sorted(planted, reverse=True):
        at = next((i for i, o in enumerate(offsets) if o >= depth * total), len(sentences))
        sentences.insert(at, fact)
    paragraphs = [" ".join(sentences[i : i + 6]) for i in range(0, len(sentences), 6)]
    return "\n\n".join(paragraphs)


def _fact(vault: str, code: str) -> str:
    return f"The access code for the {vault} vault is {code}."


class ContextCase(Case):
    def __init__(
        self,
        slug: str,
        context_tokens: int,
        facts: Sequence[tuple[float, str, str]],
        distractor: tuple[float, str, str],
        question: str,
        near_miss: str,
    ) -> None:
        self.case_id = f"reliable-context/{slug}"
        self.capability = Capability.RELIABLE_CONTEXT
        self.context_tokens = context_tokens
        self._facts = tuple(facts)
        self._distractor = distractor
        self._question = question
        self._near_miss = near_miss

    @cached_property
    def _request(self) -> SuiteRequest:
        answer = answer_tokens(self.context_tokens)
        chars = (self.context_tokens - RESERVE_TOKENS - answer) * CHARS_PER_TOKEN
        planted = [(d, _fact(v, c)) for d, v, c in (*self._facts, self._distractor)]
        body = document(self.case_id, chars, planted)
        prompt = (
            "Below is a long archive of notes. Read it, then answer the question after it.\n\n"
            f"{body}{ANCHOR_MARK}{self._question}"
        )
        return SuiteRequest(system=SYSTEM, messages=(user(prompt),), max_tokens=answer)

    def start(self) -> SuiteRequest:
        return self._request

    def names(self) -> Iterable[str]:
        return ("access-code", "access-codes")

    @property
    def codes(self) -> list[str]:
        return [code for _, _, code in self._facts]

    def judge(self, history: SuiteRequest, answer: SuiteAnswer) -> Failure | None:
        if answer.tool_calls:
            return fail(Why.UNEXPECTED_TOOL_CALL, answer.tool_calls[0].name)
        if len(self._facts) == 1:
            return check_answer(
                answer.text, "access-code", self.codes[0], distractors=[self._distractor[2]]
            )
        found = [c.upper() for c in _CODE.findall(answer.text)]
        if self._distractor[2] in found:
            return fail(Why.ANSWER_DISTRACTOR, "access-codes")
        return None if found == self.codes else fail(Why.ANSWER_MISSING, "access-codes")

    def reference(self, request: SuiteRequest) -> SuiteAnswer:
        return say(", ".join(self.codes))

    def near_miss(self, request: SuiteRequest) -> SuiteAnswer:
        return say(self._near_miss)


def reliable_context_cases(context_tokens: int) -> list[Case]:
    if context_tokens < MIN_CONTEXT_TOKENS:
        raise ValueError(f"reliable-context needs at least {MIN_CONTEXT_TOKENS} tokens")

    def one(slug: str, depth: float, vault: str, code: str, decoy: tuple[float, str, str]) -> Case:
        question = f"What is the access code for the {vault} vault? Answer with the code only."
        return ContextCase(
            slug, context_tokens, [(depth, vault, code)], decoy, question, near_miss=decoy[2]
        )

    three = [(0.2, "Cygnus", "5521-AL"), (0.55, "Draco", "8046-ZE"), (0.85, "Hydra", "3379-WU")]
    return [
        one("depth-10", 0.1, "Orion", "7341-KQ", (0.6, "Oriel", "2958-TX")),
        one("depth-50", 0.5, "Lyra", "4127-MB", (0.15, "Lyric", "9930-PD")),
        one("depth-90", 0.9, "Vega", "6602-RS", (0.35, "Vesta", "1184-HN")),
        ContextCase(
            "three-depths",
            context_tokens,
            three,
            (0.7, "Hydrus", "6290-QB"),
            "List the access codes of the Cygnus, Draco and Hydra vaults, in that order, "
            "separated by commas. Codes only.",
            near_miss="5521-AL, 8046-ZE",
        ),
    ]
