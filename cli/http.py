"""The CLI's connection to a running API: a client-credentials token, then plain calls.
Problems (RFC 9457) become a non-zero exit with the reason on stderr."""

from __future__ import annotations

from typing import Any

import httpx
import jwt
import typer
from rich.console import Console
from rich.markup import escape

from core.settings import get_settings

err = Console(stderr=True)
# What every error body of the API carries one of (RFC 9457, or OAuth's `error` on the token).
_PROBLEM_KEYS = {"status", "title", "detail", "error"}


class Api:
    def __init__(self, base_url: str, client_id: str, client_secret: str) -> None:
        self._http = httpx.Client(base_url=base_url, timeout=60)
        self._credentials = (client_id, client_secret)
        self.tenant_id = self._sign_in()

    def _sign_in(self) -> str:
        """A fresh token on every later request; the tenant it names."""
        resp = self._http.post(
            "/oauth/token", data={"grant_type": "client_credentials"}, auth=self._credentials
        )
        _raise_for_problem(resp)
        token = resp.json()["access_token"]
        self._http.headers["Authorization"] = f"Bearer {token}"
        # Only to tell the operator which tenant they act for; the server verifies the token.
        return str(jwt.decode(token, options={"verify_signature": False}).get("tid"))

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        resp = self.request(method, path, **kwargs)
        return resp.json() if resp.content else None

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The response itself (headers included), once it is known not to be a problem. A
        transport failure (the API restarting under `evaluate --wait`, a read timeout) exits 2
        with what failed, as when the API cannot be reached at all."""
        resp = self._send(method, path, **kwargs)
        if resp.status_code == 401:
            # The token ran out under a long command (`evaluate --wait` polls for up to an
            # hour, a token lives an hour by default): signed in again once, and asked again.
            try:
                self._sign_in()
            except httpx.TransportError as exc:
                err.print(f"[red]The API did not answer a new sign-in: {_failure(exc)}[/red]")
                raise typer.Exit(2) from None
            resp = self._send(method, path, **kwargs)
        _raise_for_problem(resp)
        return resp

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            err.print(f"[red]The API did not answer {method} {path}: {_failure(exc)}[/red]")
            raise typer.Exit(2) from None


def connect() -> Api:
    s = get_settings()
    if not s.client_id or s.client_secret is None:
        err.print(
            "[red]Set MODEL_ROUTER_CLIENT_ID and MODEL_ROUTER_CLIENT_SECRET "
            "(and MODEL_ROUTER_API_URL if the API is not on 127.0.0.1:8000).[/red]"
        )
        raise typer.Exit(2)
    try:
        return Api(s.api_url, s.client_id, s.client_secret.get_secret_value())
    except httpx.TransportError as exc:
        err.print(f"[red]Cannot reach the API at {escape(s.api_url)}: {_failure(exc)}[/red]")
        raise typer.Exit(2) from None


def _failure(exc: Exception) -> str:
    """The transport failure's class and its reason, never read as markup: the class alone
    (`ConnectError`) left a refused port, an unknown host and a TLS failure looking alike."""
    said = str(exc)
    return escape(f"{type(exc).__name__}: {said}" if said else type(exc).__name__)


def _raise_for_problem(resp: httpx.Response) -> None:
    if resp.is_redirect:
        # An ingress sending http to https, or a sign-in proxy: the CLI follows no redirect
        # (it would drop the Authorization header anyway), and went on to read the redirect's
        # empty body as JSON, a traceback.
        where = escape(resp.headers.get("location", "?"))
        err.print(
            f"[red]{resp.status_code}: the API at {escape(str(resp.request.url))} redirects to "
            f"{where}; set MODEL_ROUTER_API_URL to the address it names[/red]"
        )
        raise typer.Exit(2)
    if resp.status_code < 400:
        if resp.content and "json" not in resp.headers.get("content-type", ""):
            err.print(
                f"[red]{resp.status_code}: {escape(str(resp.request.url))} answered "
                f"{escape(resp.headers.get('content-type', 'no content type'))}, not the API's "
                "JSON; is MODEL_ROUTER_API_URL the API?[/red]"
            )
            raise typer.Exit(2)
        return
    try:
        problem = resp.json()
    except ValueError:
        problem = None
    if not isinstance(problem, dict) or not _PROBLEM_KEYS & problem.keys():
        # Not the API's problem+json: an ingress's 502 page while the API's pods are down, a
        # proxy's 504. Not a refusal: it exited 1 as one, and printed the whole page.
        said = " ".join((resp.text or resp.reason_phrase).split())
        err.print(
            f"[red]{resp.status_code} from {escape(str(resp.request.url))}, not the API's "
            f"answer: {escape(said[:200])}[/red]"
        )
        raise typer.Exit(2)
    # The server's words are printed as they are, never read as rich markup: a pattern's
    # `[a-z0-9]` was taken for a style and vanished, and a `[/x]` raised MarkupError.
    title, detail = escape(str(problem.get("title", ""))), escape(str(problem.get("detail", "")))
    err.print(f"[red]{resp.status_code} {title}: {detail}[/red]")
    for refusal in problem.get("refusals", []):
        said = refusal["message"] if isinstance(refusal, dict) else refusal
        err.print(f"  - {said}", markup=False)
    for error in problem.get("errors", []):
        err.print(f"  - {error.get('field')}: {error.get('message')}", markup=False)
    for diff in problem.get("differences", []):
        err.print(
            f"  - {diff['field']}: {diff['existing']!r} → {diff['published']!r}", markup=False
        )
    # The API's own 503s (Temporal or the store away) and 429s (its rate limit) say to come
    # back, as no answer does: not a refusal.
    raise typer.Exit(2 if resp.status_code in (429, 503) else 1)
