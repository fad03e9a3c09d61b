"""agent-task-success: small multi-step tool tasks over simulated business systems, judged
end to end by the state they leave (and the final answer where one is asked for)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from domain.enums import Capability
from domain.suite.cases.base import Case
from domain.suite.cases.drivers import (
    Calls,
    Move,
    Say,
    SimTool,
    ToolError,
    ToolTaskCase,
    World,
    call,
)
from domain.suite.reasons import Failure, Why, fail
from domain.suite.types import function
from domain.suite.verifiers.text import check_answer
from domain.suite.verifiers.values import norm

SYSTEM = (
    "You are an operations agent. Complete the user's task end to end with the tools, then "
    "reply briefly."
)
_STRING = {"type": "string"}
_ORDERS = {"A-101": "paid", "A-102": "pending", "A-103": "paid", "A-104": "shipped"}
_BUSY = {"ana": ["09:00-11:00", "13:00-14:00"], "ben": ["11:00-12:00", "14:00-15:00"]}
_INVOICES = (
    "inv_1  2026-09-01 09:12  49.00 EUR  paid\n"
    "inv_2  2026-10-01 09:15  49.00 EUR  paid\n"
    "inv_3  2026-10-01 10:42  49.00 EUR  paid"
)


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
        f"agent-task-success/{slug}",
        Capability.AGENT_TASK_SUCCESS,
        system=SYSTEM,
        prompt=prompt,
        tools=tools,
        world=world,
        goal=goal,
        script=script,
        near_miss=near,
        max_turns=8,
        names=names,
    )


def _list_orders(world: World, args: dict[str, Any]) -> str:
    found = [o for o, s in world["orders"].items() if s == args["status"]]
    return "\n".join(found) or "no orders"


def _ship(world: World, args: dict[str, Any]) -> str:
    if args["order_id"] not in world["orders"]:
        raise ToolError(f"unknown order {args['order_id']}")
    world["orders"][args["order_id"]] = "shipped"
    return f"{args['order_id']} shipped"


def _shipped_paid(world: World, text: str) -> Failure | None:
    expected = {**_ORDERS, "A-101": "shipped", "A-103": "shipped"}
    if world["orders"] != expected:
        return fail(Why.GOAL_NOT_REACHED, "exactly-the-paid-orders-shipped")
    return check_answer(text, "shipped-count", ["2", "two"])


def _calendar(world: World, args: dict[str, Any]) -> str:
    busy = _BUSY.get(args["person"].strip().casefold())
    if busy is None:
        raise ToolError(f"unknown person {args['person']}")
    return "Tuesday busy: " + ", ".join(busy)


def _create_event(world: World, args: dict[str, Any]) -> str:
    world["events"].append(args)
    return "event created"


def _meeting_set(world: World, text: str) -> Failure | None:
    events = world["events"]
    if len(events) != 1:
        return fail(Why.GOAL_NOT_REACHED, "one-sync-event")
    event = events[0]
    attendees = sorted(norm(a) for a in event["attendees"])
    right = (norm(event["title"]), event["day"], event["start"], attendees) == (
        "sync",
        "tuesday",
        "12:00",
        ["ana", "ben"],
    )
    return None if right else fail(Why.GOAL_NOT_REACHED, "sync-at-earliest-common-slot")


def _find_customer(world: World, args: dict[str, Any]) -> str:
    if norm(args["email"]) != "mara@example.com":
        raise ToolError("no customer with that email")
    return "customer cus_881 (Mara Ilic)"


def _invoices(world: World, args: dict[str, Any]) -> str:
    if args["customer_id"] != "cus_881":
        raise ToolError(f"unknown customer {args['customer_id']}")
    return _INVOICES


def _refund(world: World, args: dict[str, Any]) -> str:
    world["refunds"].append((args["invoice_id"], args["amount"]))
    return f"refunded {args['amount']:.2f} EUR on {args['invoice_id']}"


def _refunded(world: World, text: str) -> Failure | None:
    if world["refunds"] != [("inv_3", 49.0)]:
        return fail(Why.GOAL_NOT_REACHED, "duplicate-refunded-once")
    return None


def _key_action(action: str) -> Callable[[World, dict[str, Any]], str]:
    def run(world: World, args: dict[str, Any]) -> str:
        if args.get("service", "payments") != "payments":
            raise ToolError(f"unknown service {args['service']}")
        world["log"].append((action, args.get("key_id", "")))
        if action == "create":
            return "created key key_new (active)"
        if action == "list":
            return "key_old (active, in use by the service secret)"
        return f"{action} done for {args.get('key_id', 'payments')}"

    return run


def _rotated(world: World, text: str) -> Failure | None:
    changes = [entry for entry in world["log"] if entry[0] != "list"]
    expected = [("create", ""), ("point", "key_new"), ("revoke", "key_old")]
    return None if changes == expected else fail(Why.GOAL_NOT_REACHED, "rotation-in-order")


def agent_task_cases() -> list[Case]:
    status = {"type": "string", "enum": ["pending", "paid", "shipped"]}
    orders = [
        SimTool(
            function("list_orders", "Order ids with a status.", {"status": status}), _list_orders
        ),
        SimTool(function("ship_order", "Ship an order.", {"order_id": _STRING}), _ship),
    ]
    event = {
        "title": _STRING,
        "day": {"type": "string", "enum": ["monday", "tuesday", "wednesday", "thursday", "friday"]},
        "start": {"type": "string", "pattern": "^[0-2][0-9]:[0-5][0-9]$"},
        "attendees": {"type": "array", "items": _STRING, "minItems": 1},
    }
    calendar = [
        SimTool(
            function("get_calendar", "A person's busy hours on Tuesday.", {"person": _STRING}),
            _calendar,
        ),
        SimTool(
            function("create_event", "Create a one-hour calendar event.", event), _create_event
        ),
    ]
    billing = [
        SimTool(
            function("find_customer", "Find a customer by email.", {"email": _STRING}),
            _find_customer,
        ),
        SimTool(
            function("list_invoices", "A customer's invoices.", {"customer_id": _STRING}), _invoices
        ),
        SimTool(
            function(
                "refund",
                "Refund an invoice.",
                {"invoice_id": _STRING, "amount": {"type": "number"}},
            ),
            _refund,
        ),
    ]
    service = {"service": _STRING}
    keys = [
        SimTool(function("list_keys", "A service's API keys.", service), _key_action("list")),
        SimTool(
            function("create_key", "Create a new API key for a service.", service),
            _key_action("create"),
        ),
        SimTool(
            function(
                "point_secret", "Point a service's secret at a key.", {**service, "key_id": _STRING}
            ),
            _key_action("point"),
        ),
        SimTool(
            function("revoke_key", "Revoke an API key.", {"key_id": _STRING}), _key_action("revoke")
        ),
    ]
    meeting = {"title": "Sync", "day": "tuesday", "start": "12:00", "attendees": ["Ana", "Ben"]}
    return [
        _case(
            "ship-paid-orders",
            "Ship every order that is paid, then tell me how many you shipped (number only).",
            orders,
            lambda: {"orders": dict(_ORDERS)},
            _shipped_paid,
            [
                call("list_orders", status="paid"),
                Calls(
                    (("ship_order", {"order_id": "A-101"}), ("ship_order", {"order_id": "A-103"}))
                ),
                Say("2"),
            ],
            {
                1: Calls(
                    (("ship_order", {"order_id": "A-101"}), ("ship_order", {"order_id": "A-102"}))
                )
            },
            ["exactly-the-paid-orders-shipped", "shipped-count"],
        ),
        _case(
            "schedule-meeting",
            "Find the earliest one-hour slot on Tuesday between 09:00 and 17:00 when both Ana and "
            "Ben are free, and create a one-hour event titled Sync for both of them there.",
            calendar,
            lambda: {"events": []},
            _meeting_set,
            [
                Calls((("get_calendar", {"person": "Ana"}), ("get_calendar", {"person": "Ben"}))),
                Calls((("create_event", meeting),)),
                Say("Created Sync on Tuesday at 12:00 for Ana and Ben."),
            ],
            {1: Calls((("create_event", {**meeting, "start": "11:00"}),))},
            ["one-sync-event", "sync-at-earliest-common-slot"],
        ),
        _case(
            "refund-duplicate",
            "The customer mara@example.com was charged twice for October. Refund the duplicate "
            "(the later of the two October invoices) in full.",
            billing,
            lambda: {"refunds": []},
            _refunded,
            [
                call("find_customer", email="mara@example.com"),
                call("list_invoices", customer_id="cus_881"),
                call("refund", invoice_id="inv_3", amount=49.0),
                Say("Refunded 49.00 EUR on inv_3."),
            ],
            {2: call("refund", invoice_id="inv_2", amount=49.0)},
            ["duplicate-refunded-once"],
        ),
        _case(
            "rotate-key",
            "Rotate the API key of the payments service: create a new key, point the service's "
            "secret at the new key, then revoke the old key, in that order.",
            keys,
            lambda: {"log": []},
            _rotated,
            [
                call("list_keys", service="payments"),
                call("create_key", service="payments"),
                call("point_secret", service="payments", key_id="key_new"),
                call("revoke_key", key_id="key_old"),
                Say("Rotated: key_new is live and key_old is revoked."),
            ],
            {1: call("revoke_key", key_id="key_old")},
            ["rotation-in-order"],
        ),
    ]
