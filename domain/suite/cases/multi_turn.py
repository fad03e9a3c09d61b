"""multi-turn: facts stated, updated and used across turns stay consistent; every answer of
the conversation is checked, the last one against facts from earlier turns."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from domain.enums import Capability
from domain.suite.cases.base import Case, Exchange
from domain.suite.cases.drivers import ConversationCase
from domain.suite.reasons import Failure
from domain.suite.verifiers.text import Uppercase, check_answer

SYSTEM = "You are a concise assistant. Keep track of what the user tells you."


def _is(
    label: str, *accepted: str, distractors: Sequence[str] = ()
) -> Callable[[str], Failure | None]:
    return lambda text: check_answer(text, label, accepted, distractors=distractors)


def _acknowledged(text: str) -> Failure | None:
    return check_answer(text, "acknowledgement", ["ok"], exact=False)


def _upper(label: str, answer: str) -> Callable[[str], Failure | None]:
    rule = Uppercase("capital-letters")

    def check(text: str) -> Failure | None:
        return check_answer(text, label, [answer]) or rule.failure(text)

    return check


def multi_turn_cases() -> list[Case]:
    def case(
        slug: str, exchanges: Sequence[Exchange], near: dict[int, str], names: Sequence[str]
    ) -> Case:
        return ConversationCase(
            f"multi-turn/{slug}", Capability.MULTI_TURN, SYSTEM, exchanges, near, names
        )

    return [
        case(
            "order-update",
            [
                Exchange(
                    "My name is Priya and my order number is 58213. It should be delivered to "
                    "Lisbon. Just reply OK for now.",
                    _acknowledged,
                    "OK",
                ),
                Exchange(
                    "Change of plan: deliver it to Porto instead. Reply OK.", _acknowledged, "OK"
                ),
                Exchange(
                    "What are my order number and my delivery city now? Answer exactly in the "
                    "form order=<number>; city=<city>",
                    _is(
                        "order-and-city",
                        "order=58213; city=porto",
                        "order=58213;city=porto",
                        distractors=["lisbon"],
                    ),
                    "order=58213; city=Porto",
                ),
            ],
            {2: "order=58213; city=Lisbon"},
            ["acknowledgement", "order-and-city"],
        ),
        case(
            "running-total",
            [
                Exchange(
                    "Let's keep a running total. Start it at 7. Reply with the total only.",
                    _is("running-total", "7"),
                    "7",
                ),
                Exchange("Add 5. Reply with the total only.", _is("running-total", "12"), "12"),
                Exchange(
                    "Now double it. Reply with the total only.", _is("running-total", "24"), "24"
                ),
            ],
            {2: "14"},
            ["running-total"],
        ),
        case(
            "capitals-rule",
            [
                Exchange(
                    "For the rest of this conversation, answer in capital letters only. What is "
                    "the capital of France? One word.",
                    _upper("city", "paris"),
                    "PARIS",
                ),
                Exchange("And the capital of Italy? One word.", _upper("city", "rome"), "ROME"),
                Exchange("And of Spain? One word.", _upper("city", "madrid"), "MADRID"),
            ],
            {2: "Madrid"},
            ["city", "capital-letters"],
        ),
        case(
            "renamed-services",
            [
                Exchange(
                    'In this conversation, call the blue service "atlas" and the green service '
                    '"borealis". Reply OK.',
                    _acknowledged,
                    "OK",
                ),
                Exchange(
                    "Which name did I give the green service? One word.",
                    _is("service-name", "borealis", distractors=["atlas"]),
                    "borealis",
                ),
                Exchange(
                    "Now swap the two names. What is the blue service called now? One word.",
                    _is("service-name", "borealis", distractors=["atlas"]),
                    "borealis",
                ),
            ],
            {2: "atlas"},
            ["acknowledgement", "service-name"],
        ),
    ]
