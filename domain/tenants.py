"""What a tenant id may be. It names the tenant's directory in the artifact store and is one
part of workflow ids such as `deployment/{tenant}/{deploymentId}`, whose deployment ids may hold
`/`: a tenant id with a `/` (`acme/prod`) could name another tenant's workflow (`acme`'s
deployment `prod/x`). So: letters, digits, `.`, `_` and `-`, starting with a letter or digit, and
at most as long as every tenant_id column (VARCHAR(100))."""

from __future__ import annotations

import re

TENANT_ID_MAX_LENGTH = 100
TENANT_ID_RULE = (
    "letters, digits, '.', '_' and '-', starting with a letter or digit, "
    f"at most {TENANT_ID_MAX_LENGTH} characters"
)
_TENANT_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{TENANT_ID_MAX_LENGTH - 1}}}")


def is_tenant_id(value: str) -> bool:
    # fullmatch: `$` would let a trailing newline through.
    return _TENANT_ID.fullmatch(value) is not None
