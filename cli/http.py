"""The CLI's connection to a running API: a client-credentials token (or MODEL_ROUTER_TOKEN, a
token from an external issuer), then plain calls. Problems (RFC 9457) become a non-zero exit
with the reason on stderr."""

from __future__ import annotations

import time
from typing import Any

import httpx
import jwt
import typer
from pydantic import SecretStr
from pydantic_settings import BaseSettings
from rich.markup import escape

from cli.output import err as err  # the commands' stderr, which they import from here
from core.settings import Settings, get_settings

# What every error body of the API carries one of (RFC 9457, or OAuth's `error` on the token).
_PROBLEM_KEYS = {"status", "title", "detail", "error"}
# Seconds: the longest any one request waits for its answer; a wait's first pause after a
# failed poll, and its longest (each pause doubles).
_TIMEOUT = 60.0
_RETRY_FIRST = 0.5
_RETRY_MAX = 5.0


class CliToken(BaseSettings):
    """`MODEL_ROUTER_TOKEN`: a bearer token the CLI sends as it is, for an API whose tokens an
    external issuer signs (RS256): the CLI could only sign in at the API's own /oauth/token.
    Read as the settings are (the environment, then `.env`); it is the CLI's alone, so it is
    not one of the service's settings."""

    model_config = Settings.model_config  # the same prefix, `.env` and hidden input

    token: SecretStr | None = None


class WaitEnded(Exception):
    """Api.poll's deadline passed before an answer. `failure` is how its last try went when it
    failed (the API not answering, a 503, a 429; already escaped for rich), None when the
    deadline passed before a try: the caller tells a wait that ran out (exit 1) from an API
    out of reach (exit 2), as only it knows whether the API answered the wait before."""

    def __init__(self, method: str, path: str, failure: str | None) -> None:
        super().__init__(f"{method} {path}: {failure or 'the deadline passed'}")
        self.request = f"{method} {escape(path)}"
        self.failure = failure


class Api:
    def __init__(
        self, base_url: str, credentials: tuple[str, str] | None, token: str | None = None
    ) -> None:
        """Signed in with the client credentials, or with `token` as it is when given."""
        self._http = httpx.Client(base_url=base_url, timeout=_TIMEOUT)
        self._credentials = credentials
        if token is not None:
            self._http.headers["Authorization"] = f"Bearer {token}"
            self.tenant_id = _tenant(token, "MODEL_ROUTER_TOKEN")
        elif credentials is not None:
            self.tenant_id = self._sign_in(credentials)
        else:
            raise ValueError("sign in with client credentials or a token")

    def _sign_in(self, credentials: tuple[str, str]) -> str:
        """A fresh token on every later request; the tenant it names."""
        resp = self._http.post(
            "/oauth/token", data={"grant_type": "client_credentials"}, auth=credentials
        )
        _raise_for_problem(resp)
        token = resp.json()["access_token"]
        self._http.headers["Authorization"] = f"Bearer {token}"
        return _tenant(token, "the token /oauth/token answered")

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        return _json(self.request(method, path, **kwargs))

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The response itself (headers included), once it is known not to be a problem. A
        transport failure (the API restarting, a read timeout) exits 2 with what failed, as
        when the API cannot be reached at all."""
        return self._answered(self._send(method, path, **kwargs), method, path, **kwargs)

    def poll(self, method: str, path: str, deadline: float, **kwargs: Any) -> Any:
        """A read a wait repeats (`evaluate --wait`), until `deadline` (time.monotonic()): a
        transport failure, a 503 (Temporal or the store away) and a 429 (the rate limit) are
        tried again after a short pause, as the API asks to come back; each try waits at most
        the time left. One restart of the API under an hour's wait ended the wait, and a try
        begun just before the deadline could outlast it by the 60 s the client allows. Past
        the deadline with no answer: WaitEnded, for the wait to say what it was waiting on
        (it exited 2 here, even when nothing had failed and the wait had merely run out)."""
        pause = _RETRY_FIRST
        failure: str | None = None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitEnded(method, path, failure)
            try:
                resp = self._http.request(method, path, timeout=min(_TIMEOUT, left), **kwargs)
            except httpx.TransportError as exc:
                failure = f"did not answer ({_failure(exc)})"
                wait = pause
            else:
                if resp.status_code not in (429, 503):
                    return _json(self._answered(resp, method, path, **kwargs))
                failure = f"answered {resp.status_code} (come back later)"
                wait = max(pause, _retry_after(resp))
            if wait >= deadline - time.monotonic():
                raise WaitEnded(method, path, failure)
            err.print(
                f"[yellow]The API {failure} to {method} {escape(path)}: trying again in "
                f"{wait:g} s[/yellow]"
            )
            time.sleep(wait)
            pause = min(pause * 2, _RETRY_MAX)

    def _answered(
        self, resp: httpx.Response, method: str, path: str, **kwargs: Any
    ) -> httpx.Response:
        """resp, or (a 401) the answer after signing in again, once known not to be a problem."""
        if resp.status_code == 401 and self._credentials is None:
            # A token given as it is cannot be taken again here: say which one was refused.
            err.print(
                "[red]The API refused MODEL_ROUTER_TOKEN (expired, or not issued for this "
                "API): take a new one.[/red]"
            )
        elif resp.status_code == 401 and self._credentials is not None:
            # The token ran out under a long command (`evaluate --wait` polls for up to an
            # hour, a token lives an hour by default): signed in again once, and asked again.
            try:
                self._sign_in(self._credentials)
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
    given = CliToken().token
    token = given.get_secret_value().strip() if given is not None else ""
    try:
        # The token first: the operator gave it for this run, over a client's credentials.
        if token:
            return Api(s.api_url, None, token)
        if not s.client_id or s.client_secret is None:
            err.print(
                "[red]Set MODEL_ROUTER_CLIENT_ID and MODEL_ROUTER_CLIENT_SECRET, or "
                "MODEL_ROUTER_TOKEN (and MODEL_ROUTER_API_URL if the API is not on "
                "127.0.0.1:8000).[/red]"
            )
            raise typer.Exit(2)
        return Api(s.api_url, (s.client_id, s.client_secret.get_secret_value()))
    except httpx.TransportError as exc:
        err.print(f"[red]Cannot reach the API at {escape(s.api_url)}: {_failure(exc)}[/red]")
        raise typer.Exit(2) from None


def _tenant(token: str, which: str) -> str:
    """The tenant the token names, only to tell the operator which one they act for (the server
    verifies the token). A token that is not a JWT is refused here (exit 2, naming `which`):
    every token the API takes is one."""
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError as exc:
        err.print(f"[red]{which} is not a JWT ({escape(str(exc))}).[/red]")
        raise typer.Exit(2) from None
    return str(claims.get("tid"))


def _json(resp: httpx.Response) -> Any:
    return resp.json() if resp.content else None


def _retry_after(resp: httpx.Response) -> float:
    """The seconds a 429 or 503 asks to wait (Retry-After in seconds): waited in full (the
    wait's deadline bounds it), as coming back sooner is refused again and spends the caller's
    rate-limit allowance (an issuer out of reach asks 10 s)."""
    try:
        return max(float(resp.headers.get("retry-after", "0")), 0.0)
    except ValueError:  # an HTTP date: the usual pause
        return 0.0


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
