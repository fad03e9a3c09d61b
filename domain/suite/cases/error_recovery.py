"""error-recovery: a simulated tool returns an error and the model must recover correctly:
retry a transient failure, look around after a wrong path, take the alternative the error
offers, or perform the step the error asks for first."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from domain.enums import Capability
from domain.suite.cases.base import Case
from domain.suite.cases.drivers import Move, Say, SimTool, ToolError, ToolTaskCase, World, call
from domain.suite.reasons import Failure, Why, fail
from domain.suite.types import function
from domain.suite.verifiers.text import check_answer

SYSTEM = (
    "You are an assistant that completes tasks with tools. Tools can fail; read their errors "
    "and act on them."
)
_STRING = {"type": "string"}


def _case(
    slug: str,
    prompt: str,
    tools: Sequence[SimTool],
    world: Callable[[], World],
    goal: Callable[[World, str], Failure | None],
    script: Sequence[Move],
    near: Mapping[int, Move],
    names: Sequence[str],
) -> Case:
    return ToolTaskCase(
        f"error-recovery/{slug}",
        Capability.ERROR_RECOVERY,
        system=SYSTEM,
        prompt=prompt,
        tools=tools,
        world=world,
        goal=goal,
        script=script,
        near_miss=near,
        max_turns=7,
        names=names,
    )


def _fetch_report(world: World, args: dict[str, Any]) -> str:
    world["attempts"] += 1
    if args["report_id"] != "Q3-17":
        raise ToolError(f"unknown report {args['report_id']}")
    if world["attempts"] == 1:
        raise ToolError("upstream timeout, please retry", transient=True)
    return "Report Q3-17 (third quarter): revenue 1,204,330 EUR; costs 880,410 EUR."


_FILES = {"config/app.yaml": "max_connections: 64\ntimeout_s: 30\n", "config/logging.yaml": ""}


def _read_file(world: World, args: dict[str, Any]) -> str:
    if args["path"] not in _FILES:
        raise ToolError(f"no such file: {args['path']}")
    return _FILES[args["path"]]


def _list_dir(world: World, args: dict[str, Any]) -> str:
    prefix = args["path"].rstrip("/") + "/"
    names = sorted(p[len(prefix) :] for p in _FILES if p.startswith(prefix))
    if not names:
        raise ToolError(f"no such directory: {args['path']}")
    return "\n".join(names)


def _book_room(world: World, args: dict[str, Any]) -> str:
    if args["room"] == "B12":
        raise ToolError(
            f"B12 is already booked at {args['start']}. Free rooms then: B14, C02 (nearest first)."
        )
    if args["room"] not in ("B14", "C02"):
        raise ToolError(f"unknown room {args['room']}")
    world["bookings"].append((args["room"], args["start"]))
    return f"booked {args['room']} at {args['start']}"


def _refresh(world: World, args: dict[str, Any]) -> str:
    world["token_fresh"] = True
    return "token refreshed"


def _balance(world: World, args: dict[str, Any]) -> str:
    if not world["token_fresh"]:
        raise ToolError("token expired: call refresh_token, then retry", transient=True)
    if args["account_id"] != "ACC-2291":
        raise ToolError(f"unknown account {args['account_id']}")
    return "account ACC-2291 balance: 1830.55 EUR"


def _booked(world: World, text: str) -> Failure | None:
    if world["bookings"] != [("B14", "10:00")]:
        return fail(Why.GOAL_NOT_REACHED, "first-free-room-booked")
    return None


def _after(
    flag: str, label: str, goal: Callable[[str], Failure | None]
) -> Callable[[World, str], Failure | None]:
    def judged(world: World, text: str) -> Failure | None:
        if not world[flag]:
            return fail(Why.GOAL_NOT_REACHED, label)
        return goal(text)

    return judged


def error_recovery_cases() -> list[Case]:
    fetch = SimTool(
        function("fetch_report", "Fetch a finance report.", {"report_id": _STRING}), _fetch_report
    )
    read = SimTool(function("read_file", "Read a file.", {"path": _STRING}), _read_file)
    listing = SimTool(function("list_dir", "List a directory.", {"path": _STRING}), _list_dir)
    book = SimTool(
        function(
            "book_room",
            "Book a meeting room.",
            {"room": _STRING, "start": {"type": "string", "pattern": "^[0-2][0-9]:[0-5][0-9]$"}},
        ),
        _book_room,
    )
    refresh = SimTool(function("refresh_token", "Refresh the API token.", {}), _refresh)
    balance = SimTool(
        function("get_balance", "An account's balance.", {"account_id": _STRING}), _balance
    )
    revenue = ["1204330", "1,204,330", "1 204 330", "1,204,330 eur", "1204330 eur"]
    return [
        _case(
            "transient-retry",
            "Fetch report Q3-17 and tell me its revenue in EUR, digits only.",
            [fetch],
            lambda: {"attempts": 0},
            lambda world, text: check_answer(text, "revenue", revenue),
            [
                call("fetch_report", report_id="Q3-17"),
                call("fetch_report", report_id="Q3-17"),
                Say("1204330"),
            ],
            {1: Say("The report service timed out, so I cannot give the revenue.")},
            ["revenue"],
        ),
        _case(
            "wrong-path",
            "What is max_connections in config/app.yml? Answer with the number only.",
            [read, listing],
            dict,
            lambda world, text: check_answer(text, "max-connections", "64"),
            [
                call("read_file", path="config/app.yml"),
                call("list_dir", path="config"),
                call("read_file", path="config/app.yaml"),
                Say("64"),
            ],
            {1: call("read_file", path="config/app.yml")},
            ["max-connections"],
        ),
        _case(
            "room-taken",
            "Book room B12 at 10:00 for our meeting. If it is taken, book the first free room "
            "the booking system suggests instead.",
            [book],
            lambda: {"bookings": []},
            _booked,
            [
                call("book_room", room="B12", start="10:00"),
                call("book_room", room="B14", start="10:00"),
                Say("B12 was taken; I booked B14 at 10:00."),
            ],
            {1: call("book_room", room="C02", start="10:00")},
            ["first-free-room-booked"],
        ),
        _case(
            "expired-token",
            "What is the balance of account ACC-2291? Answer with the amount in EUR only.",
            [balance, refresh],
            lambda: {"token_fresh": False},
            _after(
                "token_fresh",
                "token-refreshed",
                lambda text: check_answer(text, "balance", ["1830.55", "1830.55 eur"]),
            ),
            [
                call("get_balance", account_id="ACC-2291"),
                call("refresh_token"),
                call("get_balance", account_id="ACC-2291"),
                Say("1830.55"),
            ],
            {1: Say("1830.00")},
            ["balance", "token-refreshed"],
        ),
    ]
