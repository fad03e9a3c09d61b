"""strict-json (JSON mode: the whole output parses, as an object of the asked shape) and
json-schema (structured output that validates against a strict schema)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from domain.enums import Capability
from domain.suite.cases.base import Case, SingleTurnCase, say, text_only
from domain.suite.types import SuiteRequest, SuiteResponseFormat, user
from domain.suite.verifiers.json_output import check_json_object, check_schema_output
from domain.suite.verifiers.values import Exact, Unordered

SYSTEM = "You answer with data only, in exactly the format the user asks for."


def _strict(slug: str, prompt: str, expected: Mapping[str, Any], reference: Any, near: str) -> Case:
    request = SuiteRequest(
        system=SYSTEM,
        messages=(user(prompt),),
        response_format=SuiteResponseFormat(type="json_object"),
    )
    return SingleTurnCase(
        f"strict-json/{slug}",
        Capability.STRICT_JSON,
        request,
        text_only(lambda text: check_json_object(text, expected)),
        say(json.dumps(reference)),
        say(near),
        names=list(expected),
    )


def _object(properties: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": dict(properties),
        "required": list(properties),
        "additionalProperties": False,
    }


def _schema(
    slug: str,
    name: str,
    prompt: str,
    schema: dict[str, Any],
    expected: Mapping[str, Any],
    reference: Any,
    near: Any,
) -> Case:
    request = SuiteRequest(
        system=SYSTEM,
        messages=(user(prompt),),
        response_format=SuiteResponseFormat(
            type="json_schema", name=name, json_schema=schema, strict=True
        ),
    )
    return SingleTurnCase(
        f"json-schema/{slug}",
        Capability.JSON_SCHEMA,
        request,
        text_only(lambda text: check_schema_output(text, schema, expected)),
        say(json.dumps(reference)),
        say(json.dumps(near)),
    )


def strict_json_cases() -> list[Case]:
    quote = 'He said "ship it"\nand left.'
    config = {
        "service": "billing",
        "retries": 3,
        "verbose": False,
        "endpoints": ["/pay", "/refund"],
    }
    return [
        _strict(
            "extract-person",
            'Extract the person from this sentence as a JSON object with exactly the keys "name"'
            ' (a string) and "age" (an integer): "Ada Lovelace, the mathematician, was 36 years '
            'old when she died."',
            {"name": "Ada Lovelace", "age": 36},
            {"name": "Ada Lovelace", "age": 36},
            '{"name": "Ada Lovelace", "age": "36"}',
        ),
        _strict(
            "first-primes",
            'Return a JSON object whose only key, "primes", holds the first five prime numbers '
            "in increasing order.",
            {"primes": [2, 3, 5, 7, 11]},
            {"primes": [2, 3, 5, 7, 11]},
            "[2, 3, 5, 7, 11]",
        ),
        _strict(
            "service-config",
            'Write this configuration as a JSON object: key "service" set to "billing", key '
            '"retries" set to the integer 3, key "verbose" set to false, and key "endpoints" '
            'set to the list of the strings "/pay" and "/refund", in that order. No other keys.',
            config,
            config,
            "{'service': 'billing', 'retries': 3, 'verbose': False, 'endpoints': ['/pay', "
            "'/refund']}",
        ),
        _strict(
            "escaped-quote",
            'Return a JSON object with the single key "quote" whose value is exactly the text '
            "between the two lines of dashes, quotation marks and line break included.\n"
            f"-----\n{quote}\n-----",
            {"quote": Exact(quote)},
            {"quote": quote},
            json.dumps({"quote": quote.replace("\n", " ")}),
        ),
    ]


_INVOICE = _object(
    {
        "invoice_id": {"type": "string", "pattern": "^INV-[0-9]{4}$"},
        "currency": {"type": "string", "enum": ["EUR", "USD", "GBP"]},
        "total": {"type": "number"},
        "lines": {
            "type": "array",
            "minItems": 1,
            "items": _object(
                {
                    "sku": {"type": "string"},
                    "quantity": {"type": "integer", "minimum": 1},
                    "unit_price": {"type": "number"},
                }
            ),
        },
    }
)
_DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday"]
_MEETING = _object(
    {
        "title": {"type": "string"},
        "day": {"type": "string", "enum": _DAYS},
        "start": {"type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$"},
        "attendees": {"type": "array", "minItems": 1, "items": {"type": "string"}},
    }
)
_TRIAGE = _object(
    {
        "category": {"type": "string", "enum": ["bug", "feature_request", "question"]},
        "severity": {"type": "integer", "minimum": 1, "maximum": 4},
        "component": {"type": "string", "enum": ["login", "reports", "billing", "settings"]},
    }
)
_CONTACT = _object(
    {
        "name": {"type": "string"},
        "address": _object(
            {
                "street": {"type": "string"},
                "city": {"type": "string"},
                "postcode": {"type": "string"},
            }
        ),
        "emails": {"type": "array", "items": {"type": "string"}},
    }
)


def json_schema_cases() -> list[Case]:
    invoice_lines = [
        {"sku": "A-100", "quantity": 2, "unit_price": 12.5},
        {"sku": "B-7", "quantity": 1, "unit_price": 5.0},
    ]
    invoice = {"invoice_id": "INV-0042", "currency": "EUR", "total": 30.0, "lines": invoice_lines}
    bad_lines = [{**invoice_lines[0], "quantity": "2"}, invoice_lines[1]]
    meeting = {
        "title": "Weekly design review",
        "day": "thursday",
        "start": "14:30",
        "attendees": ["Mei", "Tomas", "Aisha"],
    }
    triage = {"category": "bug", "severity": 2, "component": "reports"}
    address = {"street": "Lindenstrasse 5", "city": "Berlin", "postcode": "10969"}
    contact = {"name": "Jonas Weber", "address": address, "emails": ["jonas@example.org"]}
    return [
        _schema(
            "invoice",
            "invoice",
            "Extract this invoice. Invoice INV-0042, billed in euros: 2 x SKU A-100 at 12.50 "
            "each and 1 x SKU B-7 at 5.00. Total 30.00.",
            _INVOICE,
            {
                "invoice_id": Exact("INV-0042"),
                "currency": Exact("EUR"),
                "total": 30,
                "lines": Unordered(tuple(invoice_lines)),
            },
            invoice,
            {**invoice, "lines": bad_lines},
        ),
        _schema(
            "meeting",
            "meeting",
            'Record this meeting: the "Weekly design review" takes place every Thursday at '
            "14:30 with Mei, Tomas and Aisha. Use a lower-case day name and 24-hour time.",
            _MEETING,
            {
                "title": "Weekly design review",
                "day": Exact("thursday"),
                "start": Exact("14:30"),
                "attendees": Unordered(("Mei", "Tomas", "Aisha")),
            },
            meeting,
            {**meeting, "notes": "recurring"},
        ),
        _schema(
            "triage",
            "triage",
            "Triage this support message with these rules: a crash is a bug of severity 2, and "
            'the component is the page the user names.\nMessage: "The export button crashes '
            'the app every time I click it on the reports page."',
            _TRIAGE,
            {"category": Exact("bug"), "severity": 2, "component": Exact("reports")},
            triage,
            {**triage, "category": "Bug"},
        ),
        _schema(
            "contact-card",
            "contact",
            "Make a contact card for: Jonas Weber, Lindenstrasse 5, 10969 Berlin, "
            "jonas@example.org",
            _CONTACT,
            {
                "name": "Jonas Weber",
                "address": {"street": "Lindenstrasse 5", "city": "Berlin", "postcode": "10969"},
                "emails": ["jonas@example.org"],
            },
            contact,
            {**contact, "address": {"street": "Lindenstrasse 5", "city": "Berlin"}},
        ),
    ]
