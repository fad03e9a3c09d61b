"""Text verifiers: IFEval-style constraints that a program can check (length, casing,
forbidden words, format), and short answers that must give an expected value."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from domain.suite.reasons import Failure, Why, fail
from domain.suite.verifiers.values import norm

_WORD = re.compile(r"[A-Za-z0-9]+(?:['\u2019-][A-Za-z0-9]+)*")
_BULLET = re.compile(r"^\s*[-*•]\s+\S")
_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)")


def words(text: str) -> list[str]:
    return _WORD.findall(text)


@dataclass(frozen=True)
class Constraint:
    """One checkable instruction. `name` is what a failure shows (a fixed, declared name)."""

    name: str

    def failure(self, text: str) -> Failure | None:
        raise NotImplementedError


@dataclass(frozen=True)
class MaxWords(Constraint):
    limit: int = 0

    def failure(self, text: str) -> Failure | None:
        return fail(Why.CONSTRAINT, self.name) if len(words(text)) > self.limit else None


@dataclass(frozen=True)
class MinWords(Constraint):
    limit: int = 0

    def failure(self, text: str) -> Failure | None:
        return fail(Why.CONSTRAINT, self.name) if len(words(text)) < self.limit else None


@dataclass(frozen=True)
class Lowercase(Constraint):
    def failure(self, text: str) -> Failure | None:
        return fail(Why.CONSTRAINT, self.name) if text != text.lower() else None


@dataclass(frozen=True)
class Uppercase(Constraint):
    """Every cased letter upper case; with `skip_first_line`, a title line is exempt."""

    skip_first_line: bool = False

    def failure(self, text: str) -> Failure | None:
        body = text.strip().split("\n", 1)[-1] if self.skip_first_line else text
        return fail(Why.CONSTRAINT, self.name) if body != body.upper() else None


@dataclass(frozen=True)
class NoCharacter(Constraint):
    character: str = ","

    def failure(self, text: str) -> Failure | None:
        return fail(Why.CONSTRAINT, self.name) if self.character in text else None


@dataclass(frozen=True)
class Forbidden(Constraint):
    """No listed word, in any case or inflection that starts with it (cache, caches)."""

    banned: tuple[str, ...] = ()

    def failure(self, text: str) -> Failure | None:
        seen = [w.casefold() for w in words(text)]
        for word in self.banned:
            if any(w == word or w.startswith(word) for w in seen):
                return fail(Why.FORBIDDEN_WORD, word)
        return None


@dataclass(frozen=True)
class Includes(Constraint):
    required: tuple[str, ...] = ()

    def failure(self, text: str) -> Failure | None:
        seen = {w.casefold() for w in words(text)}
        missing = [w for w in self.required if w.casefold() not in seen]
        return fail(Why.CONSTRAINT, self.name) if missing else None


@dataclass(frozen=True)
class BulletCount(Constraint):
    """Exactly `count` bullet lines and, with `only`, no other non-blank line."""

    count: int = 0
    only: bool = True

    def failure(self, text: str) -> Failure | None:
        lines = [line for line in text.strip().splitlines() if line.strip()]
        bullets = [line for line in lines if _BULLET.match(line)]
        if len(bullets) != self.count or (self.only and len(bullets) != len(lines)):
            return fail(Why.CONSTRAINT, self.name)
        return None


@dataclass(frozen=True)
class SentenceCount(Constraint):
    count: int = 0

    def failure(self, text: str) -> Failure | None:
        stripped = text.strip()
        found = len(_SENTENCE_END.findall(stripped))
        # A last sentence without its full stop still counts as a sentence.
        if stripped and not _SENTENCE_END.search(stripped[-1:] + " "):
            found += 1
        return fail(Why.CONSTRAINT, self.name) if found != self.count else None


@dataclass(frozen=True)
class EndsWith(Constraint):
    phrase: str = ""

    def failure(self, text: str) -> Failure | None:
        return fail(Why.CONSTRAINT, self.name) if not text.rstrip().endswith(self.phrase) else None


@dataclass(frozen=True)
class Pattern(Constraint):
    """The whole answer matches a regular expression fixed by the case (never the model's)."""

    regex: str = ""

    def failure(self, text: str) -> Failure | None:
        found = re.fullmatch(self.regex, text.strip(), flags=re.DOTALL)
        return None if found else fail(Why.CONSTRAINT, self.name)


def check_constraints(text: str, constraints: Sequence[Constraint]) -> Failure | None:
    if not text.strip():
        return fail(Why.EMPTY)
    for constraint in constraints:
        broken = constraint.failure(text)
        if broken is not None:
            return broken
    return None


def short(text: str) -> str:
    """An answer stripped of what people wrap short answers in: space, quotes, backticks,
    a trailing full stop."""
    return norm(text.strip().strip("`'\"*").rstrip(".").strip().strip("`'\"*"))


def check_answer(
    text: str,
    label: str,
    expected: str | Sequence[str],
    *,
    exact: bool = True,
    distractors: Sequence[str] = (),
) -> Failure | None:
    """The answer gives `expected` (one of several accepted forms): as the whole short answer
    when `exact`, or as a whole word sequence somewhere in it otherwise; and no distractor."""
    if not text.strip():
        return fail(Why.EMPTY)
    accepted = [expected] if isinstance(expected, str) else list(expected)
    answer = short(text)
    for distractor in distractors:
        if _contains(answer, norm(distractor)):
            return fail(Why.ANSWER_DISTRACTOR, label)
    if exact:
        hit = any(answer == norm(a) for a in accepted)
    else:
        hit = any(_contains(answer, norm(a)) for a in accepted)
    return None if hit else fail(Why.ANSWER_MISSING, label)


def _contains(haystack: str, needle: str) -> bool:
    """`needle` as a whole token sequence: 12 is not found in 412 or in 12a."""
    return re.search(rf"(?<![\w-]){re.escape(needle)}(?![\w-])", haystack) is not None
