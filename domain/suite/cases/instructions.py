"""instruction-following: IFEval-style constraints that a program checks (length, casing,
forbidden words, format), several per case, all of which must hold."""

from __future__ import annotations

from collections.abc import Sequence

from domain.enums import Capability
from domain.suite.cases.base import Case, SingleTurnCase, say, text_only
from domain.suite.types import SuiteRequest, user
from domain.suite.verifiers.text import (
    BulletCount,
    Constraint,
    EndsWith,
    Forbidden,
    Lowercase,
    MaxWords,
    MinWords,
    NoCharacter,
    Pattern,
    SentenceCount,
    Uppercase,
    check_constraints,
)

SYSTEM = "You are a careful writer who follows formatting instructions to the letter."


def _case(
    slug: str, prompt: str, constraints: Sequence[Constraint], reference: str, near: str
) -> Case:
    names = [c.name for c in constraints]
    for constraint in constraints:
        if isinstance(constraint, Forbidden):
            names += constraint.banned
    return SingleTurnCase(
        f"instruction-following/{slug}",
        Capability.INSTRUCTION_FOLLOWING,
        SuiteRequest(system=SYSTEM, messages=(user(prompt),)),
        text_only(lambda text: check_constraints(text, constraints)),
        say(reference),
        say(near),
        names,
    )


def instruction_following_cases() -> list[Case]:
    ocean = (
        "the ocean covers most of our planet and holds nearly all of its water. its deep blue "
        "waves rise and fall with the wind and the pull of the moon."
    )
    bullets = (
        "- They catch regressions early.\n"
        "- They document the intended behaviour.\n"
        "- They make refactoring safer."
    )
    cache = (
        "A cache keeps copies of recently used data close to where it is needed, so later "
        "requests are served without going back to the slower original source. That is all."
    )
    lighthouse = (
        "LIGHTHOUSES STAND ON ROCKY COASTS AND HEADLANDS TO WARN SHIPS OF DANGER. THEIR "
        "TURNING LAMPS FLASH IN PATTERNS THAT SAILORS CAN RECOGNISE FROM FAR AWAY, EVEN ON "
        "STORMY NIGHTS."
    )
    return [
        _case(
            "lowercase-ocean",
            "Describe the ocean in exactly two sentences. Write only lowercase letters, use no "
            "commas, and keep it under 40 words.",
            [
                Lowercase("lowercase"),
                NoCharacter("no-commas", ","),
                SentenceCount("two-sentences", 2),
                MaxWords("under-40-words", 39),
            ],
            ocean,
            ocean.replace("planet and", "planet, and"),
        ),
        _case(
            "three-bullets",
            "List exactly three benefits of unit tests as a markdown bullet list using '- ' "
            "bullets. Output only the list, nothing before or after it.",
            [BulletCount("exactly-three-bullets", count=3)],
            bullets,
            bullets + "\n- They speed up code review.",
        ),
        _case(
            "forbidden-words",
            'Explain what a cache is in at most 50 words without using the words "memory" or '
            '"fast". End your answer with the exact phrase "That is all."',
            [
                Forbidden("forbidden-words", ("memory", "fast")),
                MaxWords("at-most-50-words", 50),
                EndsWith("ends-with-phrase", "That is all."),
            ],
            cache,
            cache.replace("are served", "are served fast"),
        ),
        _case(
            "title-and-capitals",
            "Write a title wrapped in double angular brackets, like <<my title>>, alone on the "
            "first line. Then write one paragraph about lighthouses entirely in capital "
            "letters. The whole answer must be at least 30 words long.",
            [
                Pattern("title-in-double-angular-brackets", r"<<[^<>\n]+>>[ \t]*\n.+"),
                Uppercase("all-capitals", skip_first_line=True),
                MinWords("at-least-30-words", 30),
            ],
            f"<<Guardians of the Coast>>\n{lighthouse}",
            f"<Guardians of the Coast>\n{lighthouse}",
        ),
    ]
