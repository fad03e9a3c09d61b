"""The Secret Broker: turns a deployment's endpointRef into a live connection.

endpointRef values are stored in the catalog; what they resolve to (keys, and base URLs that may
embed tenancy) never is. Nothing here logs, and a Connection's repr masks its key.

An operator writes endpointRefs, so what they may name is an allow-list (`SecretPolicy`): `file:`
only under configured directories, `env:` only variables with a configured name or prefix, and
never the gateway's own configuration (`MODEL_ROUTER_*` outside `MODEL_ROUTER_PROVIDER_`, and
never a settings variable) — otherwise `env:MODEL_ROUTER_AUTH_JWT_SECRET` would send the token
signing key to a provider as its credential (issue 19).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Protocol

from pydantic import BaseModel, ConfigDict, SecretStr

UPSTREAM_DUMMY_KEY = "upstream-simulator-key"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOST_PORT = re.compile(r"^(?P<host>[A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\]):(?P<port>[0-9]{1,5})$")


class Connection(BaseModel):
    model_config = ConfigDict(frozen=True)

    api_key: SecretStr
    base_url: str | None = None


class SecretResolutionError(Exception):
    """The reference could not be resolved. Messages name the reference, never a secret."""


class SecretBroker(Protocol):
    async def resolve(self, endpoint_ref: str) -> Connection: ...


def split_ref(endpoint_ref: str) -> tuple[str, str]:
    scheme, sep, rest = endpoint_ref.partition(":")
    if not sep or not rest:
        raise SecretResolutionError(f"endpointRef {endpoint_ref!r} has no scheme")
    return scheme, rest


def _expect(endpoint_ref: str, scheme: str) -> str:
    got, rest = split_ref(endpoint_ref)
    if got != scheme:
        raise SecretResolutionError(f"endpointRef {endpoint_ref!r} is not a {scheme}: reference")
    return rest


GATEWAY_ENV_PREFIX = "MODEL_ROUTER_"
PROVIDER_ENV_PREFIX = "MODEL_ROUTER_PROVIDER_"


@dataclass(frozen=True)
class SecretPolicy:
    """What `file:` and `env:` references may name. `None` for a list: not restricted (unit
    tests that build a broker by hand); the gateway's own variables are refused either way."""

    file_dirs: tuple[Path, ...] | None = None
    env_names: frozenset[str] | None = None
    env_prefixes: tuple[str, ...] = ()
    # The gateway's settings variables (MODEL_ROUTER_<FIELD>): never a provider credential.
    reserved_env: frozenset[str] = field(default_factory=frozenset)
    # The gateway's own secrets (its signing key, database password, …), as SHA-256 digests:
    # whatever file or variable holds one is never a provider credential. Compose mounts the
    # database password and the signing key under /run/secrets, the default file directory,
    # so `file:/run/secrets/jwt_secret` sent the signing key to a provider as its API key.
    reserved_digests: frozenset[str] = field(default_factory=frozenset)
    # References kept for some tenants (settings `secret_ref_tenants`): any other tenant naming
    # one is refused. A `file:` under an allowed directory's `tenants/<tenant>/` is that
    # tenant's without being listed.
    ref_tenants: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def reserved(self, key: str) -> bool:
        return bool(self.reserved_digests) and secret_digest(key) in self.reserved_digests

    def refusal(self, endpoint_ref: str) -> str | None:
        """Why this reference may not be used, or None; other schemes are not judged here."""
        scheme, _, rest = endpoint_ref.partition(":")
        if scheme == "env":
            return self.env_refusal(rest)
        if scheme == "file":
            return climbs(rest) or self.file_refusal(rest)
        return None

    def tenant_refusal(self, endpoint_ref: str, tenant_id: str) -> str | None:
        """Why `tenant_id` may not name this reference (another tenant's credential), or None.
        The allow-lists were the platform's alone: any tenant's operator could register another
        tenant's key, or private endpoint, and spend it. One answer whatever the reason, and
        whether or not the secret exists: the refusal says nothing of other tenants' secrets."""
        ref = normal_ref(endpoint_ref)
        owners = {t for r, ts in self.ref_tenants.items() if normal_ref(r) == ref for t in ts}
        owners |= self._file_owners(ref)
        if not owners or tenant_id in owners:
            return None
        return "the reference is kept for other tenants (secret_ref_tenants, tenants/<tenant>/)"

    def _file_owners(self, endpoint_ref: str) -> set[str]:
        """The tenants whose `tenants/<tenant>/` folder the file is in, as written (a mounted
        Secret's files are symlinks into its `..data`, so only the written path says) and
        as it resolves (a link of another folder's pointing there)."""
        scheme, _, path = endpoint_ref.partition(":")
        if scheme != "file" or not Path(path).is_absolute():
            return set()
        owners = set()
        resolved = Path(path).resolve()
        for candidate in (Path(path), resolved):
            for base in self.file_dirs or ():
                if candidate.is_relative_to(base):
                    parts = candidate.relative_to(base).parts
                    if len(parts) >= 3 and parts[0] == "tenants":
                        owners.add(parts[1])
        # And where each tenant's folder resolves to: in a mounted Secret `tenants/<t>` is a
        # link into the kubelet's `..<timestamp>/`, so a path reaching that file another way
        # (an operator's link elsewhere in the mount) resolves outside any `tenants/`.
        for base in self.file_dirs or ():
            owners |= {t for t, folder in _tenant_folders(base) if resolved.is_relative_to(folder)}
        return owners

    def env_refusal(self, name: str) -> str | None:
        gateway = name.startswith(GATEWAY_ENV_PREFIX) and not name.startswith(PROVIDER_ENV_PREFIX)
        if gateway or name in self.reserved_env:
            return f"${name} is the gateway's own configuration, never a provider credential"
        if self.env_names is None:
            return None
        if name in self.env_names or any(name.startswith(p) for p in self.env_prefixes if p):
            return None
        return f"${name} is not an allowed provider variable (see secret_env_names/prefixes)"

    def file_refusal(self, path: str) -> str | None:
        if self.file_dirs is None:
            return None
        if not Path(path).is_absolute():
            return "the path must be absolute"
        resolved = Path(path).resolve()
        if any(resolved.is_relative_to(d) for d in self.file_dirs):
            return None
        return "the file is outside the allowed secret directories (secret_file_dirs)"


def climbs(path: str) -> str | None:
    """Why a `file:` path may not hold a `..` segment, nor one starting with `..`. Its owner
    (`tenants/<tenant>/`) is read from the path as written, with `..` cancelled as text, but
    the file is read as the path resolves, through symlinks: in a mounted Secret each item is a
    link into `..data`, so `tenants/B/../../A/key` read as no tenant's file, outside
    `tenants/`, and resolved to tenant A's key; and the kubelet's own `..data/tenants/A/key`
    (no `..` segment) read as outside `tenants/` too (two security reviews' reproductions,
    2026-12-07). Nothing needs either to name a secret: the kubelet's folders are its own."""
    if any(part.startswith("..") for part in PurePosixPath(path).parts):
        return "the path must not hold `..` segments or the mount's own `..` folders"
    return None


def _tenant_folders(base: Path) -> list[tuple[str, Path]]:
    """Each `tenants/<tenant>` folder under an allowed directory, as it resolves (the kubelet's
    `..data` and `..<timestamp>` folders, when the Secret is mounted there, are no tenant's)."""
    try:
        entries = [e for e in (base / "tenants").iterdir() if not e.name.startswith(".")]
        return [(entry.name, entry.resolve()) for entry in entries]
    except OSError:  # no `tenants/` there: no tenant's folder
        return []


def normal_ref(endpoint_ref: str) -> str:
    """A reference as one spelling: a `file:` path without `.`, `..` or doubled separators (as
    written, not resolved), so that `file:/run/secrets/./x` and `file://run/secrets/x` are
    `file:/run/secrets/x`."""
    scheme, _, rest = endpoint_ref.partition(":")
    if scheme != "file" or not rest:
        return endpoint_ref
    return "file:" + os.path.normpath("/" + rest.lstrip("/"))


def secret_digest(value: str) -> str:
    return hashlib.sha256(value.strip().encode()).hexdigest()


def _refuse_reserved(policy: SecretPolicy, connection: Connection, endpoint_ref: str) -> Connection:
    if policy.reserved(connection.api_key.get_secret_value()):
        raise SecretResolutionError(
            f"endpointRef {endpoint_ref!r}: holds the gateway's own secret, never a provider "
            "credential"
        )
    return connection


class EnvSecretBroker:
    """`env:NAME`: the key is $NAME; the base URL is $NAME_BASE_URL when set."""

    def __init__(
        self, environ: Mapping[str, str] | None = None, policy: SecretPolicy | None = None
    ) -> None:
        # Read at resolve time, not copied, so rotated variables are seen.
        self._environ = environ if environ is not None else os.environ
        self._policy = policy or SecretPolicy()

    async def resolve(self, endpoint_ref: str) -> Connection:
        name = _expect(endpoint_ref, "env")
        if not _ENV_NAME.match(name):
            raise SecretResolutionError(f"endpointRef {endpoint_ref!r}: not a variable name")
        refused = self._policy.env_refusal(name)
        if refused:
            raise SecretResolutionError(f"endpointRef {endpoint_ref!r}: {refused}")
        key = self._environ.get(name, "").strip()
        if not key:
            raise SecretResolutionError(f"endpointRef {endpoint_ref!r}: ${name} is not set")
        base_url = self._environ.get(f"{name}_BASE_URL", "").strip() or None
        return _refuse_reserved(
            self._policy, Connection(api_key=SecretStr(key), base_url=base_url), endpoint_ref
        )


class FileSecretBroker:
    """`file:/path`: the file holds the bare key, or JSON {"api_key": …, "base_url": …}.

    With `allowed_dirs`, only files under those directories resolve, so a catalog entry cannot
    point the broker at an arbitrary file on the host.
    """

    def __init__(
        self, allowed_dirs: Iterable[Path | str] | None = None, policy: SecretPolicy | None = None
    ) -> None:
        self._allowed = (
            None if allowed_dirs is None else tuple(Path(d).resolve() for d in allowed_dirs)
        )
        self._policy = policy or SecretPolicy()

    async def resolve(self, endpoint_ref: str) -> Connection:
        path = Path(_expect(endpoint_ref, "file"))
        if not path.is_absolute():
            raise SecretResolutionError(f"endpointRef {endpoint_ref!r}: path must be absolute")
        # Also for an entry registered before the rule: never read as another tenant's file.
        climbing = climbs(str(path))
        if climbing is not None:
            raise SecretResolutionError(f"endpointRef {endpoint_ref!r}: {climbing}")
        text = await asyncio.to_thread(self._read, path, endpoint_ref)
        return _refuse_reserved(
            self._policy, _parse_secret_file(text.strip(), endpoint_ref), endpoint_ref
        )

    def _read(self, path: Path, endpoint_ref: str) -> str:
        resolved = path.resolve()
        if self._allowed is not None and not any(resolved.is_relative_to(d) for d in self._allowed):
            raise SecretResolutionError(f"endpointRef {endpoint_ref!r}: outside allowed dirs")
        try:
            return resolved.read_text(encoding="utf-8")
        except OSError as exc:
            raise SecretResolutionError(
                f"endpointRef {endpoint_ref!r}: cannot read ({exc.strerror})"
            ) from None


def _parse_secret_file(text: str, endpoint_ref: str) -> Connection:
    if text.startswith(("{", "[", '"')):
        try:
            data = json.loads(text)
        except ValueError:
            # Never include the text: it is the secret.
            raise SecretResolutionError(f"endpointRef {endpoint_ref!r}: invalid JSON") from None
        if isinstance(data, str):
            data = {"api_key": data}
        if not isinstance(data, dict):
            raise SecretResolutionError(f"endpointRef {endpoint_ref!r}: expected a JSON object")
        key = data.get("api_key") or data.get("apiKey")
        base_url = data.get("base_url") or data.get("baseUrl")
        if not isinstance(key, str) or not key.strip():
            raise SecretResolutionError(f"endpointRef {endpoint_ref!r}: no api_key in file")
        if base_url is not None and not isinstance(base_url, str):
            raise SecretResolutionError(f"endpointRef {endpoint_ref!r}: base_url is not text")
        return Connection(api_key=SecretStr(key.strip()), base_url=base_url or None)
    if not text or any(c.isspace() for c in text):
        raise SecretResolutionError(f"endpointRef {endpoint_ref!r}: expected a single-line key")
    return Connection(api_key=SecretStr(text))


def key_in_file(text: str) -> str:
    """The key a secret file holds (its text, or its JSON's api_key), or "" if it holds none."""
    try:
        return _parse_secret_file(text.strip(), "file:").api_key.get_secret_value()
    except SecretResolutionError:
        return ""


class UpstreamSecretBroker:
    """`upstream:HOST:PORT`: the local upstream simulator, which takes any key."""

    async def resolve(self, endpoint_ref: str) -> Connection:
        rest = _expect(endpoint_ref, "upstream")
        match = _HOST_PORT.match(rest)
        if not match or not 0 < int(match["port"]) < 65536:
            raise SecretResolutionError(f"endpointRef {endpoint_ref!r}: expected HOST:PORT")
        return Connection(
            api_key=SecretStr(UPSTREAM_DUMMY_KEY),
            base_url=f"http://{match['host']}:{int(match['port'])}",
        )


class CompositeSecretBroker:
    """Dispatches on the reference's scheme; an unconfigured scheme is an error, not a guess."""

    def __init__(self, brokers: Mapping[str, SecretBroker]) -> None:
        self._brokers = dict(brokers)

    @property
    def schemes(self) -> frozenset[str]:
        return frozenset(self._brokers)

    async def resolve(self, endpoint_ref: str) -> Connection:
        scheme, _ = split_ref(endpoint_ref)
        broker = self._brokers.get(scheme)
        if broker is None:
            raise SecretResolutionError(
                f"endpointRef {endpoint_ref!r}: no broker configured for scheme {scheme!r}"
            )
        return await broker.resolve(endpoint_ref)


def default_broker(
    *,
    allow_upstream: bool = False,
    file_dirs: Iterable[Path | str] | None = None,
    environ: Mapping[str, str] | None = None,
    policy: SecretPolicy | None = None,
) -> CompositeSecretBroker:
    """env: and file: always; upstream: (the simulator) only when asked, for dev and tests.
    With a policy, its directories bound file: (file_dirs is then ignored)."""
    dirs = policy.file_dirs if policy is not None else file_dirs
    brokers: dict[str, SecretBroker] = {
        "env": EnvSecretBroker(environ, policy),
        "file": FileSecretBroker(dirs, policy),
    }
    if allow_upstream:
        brokers["upstream"] = UpstreamSecretBroker()
    return CompositeSecretBroker(brokers)
