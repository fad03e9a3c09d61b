"""tool-calling (the right function, arguments valid against its schema) and
parallel-tool-calling (two or more independent calls in one turn)."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from domain.enums import Capability
from domain.suite.cases.base import Case, SingleTurnCase, calls
from domain.suite.types import SuiteAnswer, SuiteRequest, SuiteTool, SuiteToolChoice, function, user
from domain.suite.verifiers.tools import ExpectedCall, check_parallel_calls, check_tool_call
from domain.suite.verifiers.values import Exact, Satisfies, Unordered

SYSTEM = (
    "You are an assistant with access to tools. When a tool can answer the request, call it "
    "with arguments that follow its schema exactly."
)
_STRING = {"type": "string"}

WEATHER = function(
    "get_weather",
    "Weather forecast for a city.",
    {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["c", "f"], "description": "c: Celsius, f: Fahrenheit"},
        "days": {"type": "integer", "minimum": 1, "maximum": 7, "description": "Days ahead"},
    },
)
CURRENT_WEATHER = function(
    "get_weather",
    "Current weather in a city.",
    {"city": _STRING, "unit": {"type": "string", "enum": ["c", "f"]}},
)
TIME = function(
    "get_time", "Current local time in an IANA time zone.", {"timezone": {"type": "string"}}
)
READ_FILE = function("read_file", "Read a text file of the workspace.", {"path": _STRING})
DELETE_FILE = function("delete_file", "Delete a file of the workspace.", {"path": _STRING})
LIST_DIR = function("list_dir", "List a directory of the workspace.", {"path": _STRING})
CREATE_TICKET = function(
    "create_ticket",
    "Create a ticket in the issue tracker.",
    {
        "title": _STRING,
        "priority": {"type": "string", "enum": ["low", "medium", "high", "urgent"]},
        "labels": {"type": "array", "items": _STRING},
    },
)
SEARCH_TICKETS = function("search_tickets", "Search existing tickets.", {"query": _STRING})
_CODE = {"type": "string", "pattern": "^[A-Z]{3}$", "description": "ISO 4217 code"}
CONVERT = function(
    "convert_currency",
    "Convert an amount between currencies at today's rate.",
    {"amount": {"type": "number"}, "from_currency": _CODE, "to_currency": _CODE},
)
RATES = function("get_exchange_rates", "All rates against a base currency.", {"base": _CODE})
GET_USER = function("get_user", "A customer's profile.", {"user_id": {"type": "integer"}})
LIST_ORDERS = function(
    "list_orders",
    "A customer's orders, filtered by status.",
    {
        "user_id": {"type": "integer"},
        "status": {"type": "string", "enum": ["open", "shipped", "all"]},
    },
)


def _path(expected: str) -> Satisfies:
    return Satisfies(lambda p: posixpath.normpath(p) == expected)


def _request(prompt: str, tools: Sequence[SuiteTool], parallel: bool | None) -> SuiteRequest:
    return SuiteRequest(
        system=SYSTEM,
        messages=(user(prompt),),
        tools=tuple(tools),
        tool_choice=SuiteToolChoice(mode="auto"),
        parallel_tool_calls=parallel,
    )


def _single(
    slug: str,
    prompt: str,
    tools: Sequence[SuiteTool],
    expected: tuple[str, Mapping[str, Any]],
    reference: Mapping[str, Any],
    near_miss: SuiteAnswer,
    names: Sequence[str] = (),
) -> Case:
    name, want = expected
    return SingleTurnCase(
        f"tool-calling/{slug}",
        Capability.TOOL_CALLING,
        _request(prompt, tools, None),
        lambda answer: check_tool_call(answer, tools, name, want),
        calls((name, reference)),
        near_miss,
        names,
    )


def _parallel(
    slug: str,
    prompt: str,
    tools: Sequence[SuiteTool],
    expected: Sequence[ExpectedCall],
    reference: Sequence[tuple[str, Mapping[str, Any]]],
    near_miss: SuiteAnswer,
) -> Case:
    return SingleTurnCase(
        f"parallel-tool-calling/{slug}",
        Capability.PARALLEL_TOOL_CALLING,
        _request(prompt, tools, True),
        lambda answer: check_parallel_calls(answer, tools, expected),
        calls(*reference),
        near_miss,
    )


def tool_calling_cases() -> list[Case]:
    return [
        _single(
            "weather-forecast",
            "What will the weather be like in Lisbon over the next 3 days? I prefer Celsius.",
            [WEATHER, TIME],
            ("get_weather", {"city": "Lisbon", "unit": "c", "days": 3}),
            {"city": "Lisbon", "unit": "c", "days": 3},
            calls(("get_weather", {"city": "Lisbon", "unit": "c", "days": "3"})),
        ),
        _single(
            "delete-file",
            "Please delete the file build/old.log from the workspace.",
            [READ_FILE, DELETE_FILE, LIST_DIR],
            ("delete_file", {"path": _path("build/old.log")}),
            {"path": "build/old.log"},
            calls(("delete_file", {"path": "build/old.log", "force": True})),
            names=("force",),
        ),
        _single(
            "create-ticket",
            'Open a new high-priority ticket titled "Login page returns 500" with the labels '
            "bug and auth.",
            [SEARCH_TICKETS, CREATE_TICKET],
            (
                "create_ticket",
                {
                    "title": "Login page returns 500",
                    "priority": "high",
                    "labels": Unordered(("bug", "auth")),
                },
            ),
            {"title": "Login page returns 500", "priority": "high", "labels": ["bug", "auth"]},
            calls(("search_tickets", {"query": "Login page returns 500"})),
        ),
        _single(
            "convert-currency",
            "How much is 250 euros in Japanese yen? Use the conversion tool.",
            [RATES, CONVERT],
            (
                "convert_currency",
                {"amount": 250, "from_currency": Exact("EUR"), "to_currency": Exact("JPY")},
            ),
            {"amount": 250, "from_currency": "EUR", "to_currency": "JPY"},
            calls(("convert_currency", {"amount": 250, "from_currency": "EUR"})),
        ),
    ]


def parallel_tool_calling_cases() -> list[Case]:
    three_files = ("README.md", "setup.cfg", "LICENSE")
    zones = ("Europe/Paris", "Asia/Tokyo", "America/New_York")
    return [
        _parallel(
            "weather-two-cities",
            "Compare the current weather in Oslo and in Madrid, in Celsius. Look both up at once.",
            [CURRENT_WEATHER, TIME],
            [
                ("get_weather", {"city": "Oslo", "unit": "c"}),
                ("get_weather", {"city": "Madrid", "unit": "c"}),
            ],
            [
                ("get_weather", {"city": "Oslo", "unit": "c"}),
                ("get_weather", {"city": "Madrid", "unit": "c"}),
            ],
            calls(("get_weather", {"city": "Oslo", "unit": "c"})),
        ),
        _parallel(
            "read-three-files",
            "I need README.md, setup.cfg and LICENSE from the workspace root. Read all three "
            "in one go.",
            [READ_FILE, LIST_DIR],
            [("read_file", {"path": _path(p)}) for p in three_files],
            [("read_file", {"path": p}) for p in three_files],
            calls(
                ("read_file", {"path": "README.md"}),
                ("read_file", {"path": "README.md"}),
                ("read_file", {"path": "setup.cfg"}),
            ),
        ),
        _parallel(
            "profile-and-orders",
            "For customer 4711, fetch their profile and their open orders at the same time.",
            [GET_USER, LIST_ORDERS],
            [
                ("get_user", {"user_id": 4711}),
                ("list_orders", {"user_id": 4711, "status": "open"}),
            ],
            [
                ("get_user", {"user_id": 4711}),
                ("list_orders", {"user_id": 4711, "status": "open"}),
            ],
            calls(
                ("get_user", {"user_id": 4711}),
                ("list_orders", {"user_id": 4711, "status": "all"}),
            ),
        ),
        _parallel(
            "three-time-zones",
            "What time is it right now in Paris, Tokyo and New York? Use the IANA zones "
            "Europe/Paris, Asia/Tokyo and America/New_York, all in parallel.",
            [TIME, CURRENT_WEATHER],
            [("get_time", {"timezone": Exact(z)}) for z in zones],
            [("get_time", {"timezone": z}) for z in zones],
            calls(*[("get_time", {"timezone": z}) for z in zones[:2]]),
        ),
    ]
