"""Every JSON request body whose strings are not all text (domain/text.py) is refused as a
validation error naming the field (422, in the surface's own envelope where it has one), before
any route runs: nothing is claimed, called or stored.

It runs as an app-wide dependency, on the body FastAPI has already read. Only a body that
escapes a surrogate at all (`\\uD800`-`\\uDFFF`, a valid pair such as an escaped emoji
included) is parsed again and walked; any other is let through after one scan of its bytes.
That scan reads the bytes as UTF-8, which api/limits.py holds every JSON body to; a body it
cannot read so (UTF-16, UTF-32: a route never gets one) is walked whatever it holds. The
dependency costs 6-15 µs of CPU a request (FastAPI's dependency resolution, mostly: a minimal
app's POST of a 300-byte chat body, 4,000 requests three times, 2026-12-04), against the API's
6-7 ms a call.

A form is text by how Starlette reads it, but for one case, refused here: a multipart form
declaring a charset other than UTF-8 or ASCII, which its values are decoded from. UTF-7 (or
`unicode_escape`) gives half of a surrogate pair from plain ASCII bytes: a client id holding
one was a 500 from the store at /oauth/token to a caller not signed in, a CSRF token one at
every console form. A form without a charset is read as UTF-8, and a byte that is not UTF-8 as
Latin-1, both text; so is an urlencoded form, whatever charset it declares (Starlette reads it
as Latin-1 and its escapes as UTF-8), which is left alone: Java's Apache HttpClient declares
ISO-8859-1 on every form it sends, OAuth clients' among them. The refusal is a 400 in the
path's own terms: OAuth's `invalid_request` at /oauth/token (RFC 6749 §5.2, 400 by that RFC),
the console's error page under /console, the request's validation error elsewhere.
"""

from __future__ import annotations

import codecs
import json
import re

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from python_multipart.multipart import parse_options_header
from starlette.exceptions import HTTPException

from api.problems import VALIDATION, Problem
from domain.text import not_text

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_WRITES = frozenset({"POST", "PUT", "PATCH"})
_FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")
_MULTIPART = b"multipart/form-data"
# The charsets a multipart form may declare (as codecs names them): those whose every string is
# text and what a client sending text means by them.
_FORM_CHARSETS = frozenset({"utf-8", "ascii"})
_UTF8 = frozenset({"utf-8", "utf-8-sig"})  # what json.detect_encoding names UTF-8
_OAUTH = "/oauth/token"
_CONSOLE = "/console"  # api/console/session.PATH, not imported: that imports the console whole
NOT_UTF8_FORM = "A multipart form must be UTF-8: send it without a charset or with charset=utf-8."


async def refuse_what_is_not_text(request: Request) -> None:
    if request.method not in _WRITES:
        return
    content_type = request.headers.get("content-type", "")
    if content_type.lower().startswith(_FORMS):
        # Read by the route as a form (the OAuth token endpoint, the console): no JSON.
        _refuse_a_form_not_utf8(request.url.path, content_type)
        return
    body = await request.body()
    if not _SURROGATE_ESCAPE.search(body) and json.detect_encoding(body) in _UTF8:
        return
    try:
        parsed = json.loads(body)
    except ValueError:
        return  # not JSON: the route reports that itself
    where = not_text(parsed)
    if where is None:
        return
    raise RequestValidationError(
        [
            {
                "type": "string_not_text",
                "loc": ("body", *where),
                "msg": "not text: a surrogate escape (\\ud800-\\udfff) without its pair",
            }
        ]
    )


def _refuse_a_form_not_utf8(path: str, content_type: str) -> None:
    kind, options = parse_options_header(content_type)
    charset = options.get(b"charset")
    if kind != _MULTIPART or charset is None or _names_text(charset):
        return
    if path == _OAUTH:
        # As the token endpoint's own refusals are (api/routers/oauth.py).
        raise Problem(
            400,
            NOT_UTF8_FORM,
            type_="https://model-router.dev/problems/oauth/invalid_request",
            headers={"Cache-Control": "no-store"},
            error="invalid_request",
            error_description=NOT_UTF8_FORM,
        )
    if path == _CONSOLE or path.startswith(f"{_CONSOLE}/"):
        raise HTTPException(400, NOT_UTF8_FORM)  # the console answers it with its error page
    raise Problem(
        400, NOT_UTF8_FORM, type_=VALIDATION, errors=[{"field": "body", "message": NOT_UTF8_FORM}]
    )


def _names_text(charset: bytes) -> bool:
    try:
        return codecs.lookup(charset.decode("latin-1")).name in _FORM_CHARSETS
    except LookupError:
        return False  # no charset Python knows: Starlette reads it as Latin-1, not as sent
