"""Standard Webhooks signing for webhook deliveries, by the `standardwebhooks` package, so that
a subscriber can verify our deliveries with any Standard Webhooks library.

A signing secret is `whsec_` followed by the base64 of 32 random bytes; the HMAC key is those
bytes (what the standard and its libraries use). Subscriptions created before this module used
`whsec_` + URL-safe base64 and were signed with the whole secret string as the key, which no
Standard Webhooks library verifies; those secrets are never valid standard base64 (43
characters, no padding), so they are recognised and keep their old signature, and their
subscribers keep verifying. Deleting such a subscription and creating it again gives a standard
secret.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from datetime import UTC, datetime

from standardwebhooks import Webhook

PREFIX = "whsec_"


def new_secret() -> str:
    return PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def _is_standard(secret: str) -> bool:
    try:
        return bool(base64.b64decode(secret.removeprefix(PREFIX), validate=True))
    except binascii.Error:
        return False


def sign_with(secrets_: list[str], message_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` header for several secrets (a rotation's new one and the one it
    replaced): their signatures space-separated, which a Standard Webhooks library accepts when
    any one verifies."""
    return " ".join(sign(s, message_id, timestamp, body) for s in secrets_)


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` header value: `v1,` + base64(HMAC-SHA256(key, id.ts.body))."""
    if _is_standard(secret):
        return Webhook(secret).sign(
            message_id, datetime.fromtimestamp(timestamp, UTC), body.decode()
        )
    # A secret issued before the move to the standard's key (see the module docstring).
    signed = f"{message_id}.{timestamp}.".encode() + body
    return (
        "v1,"
        + base64.b64encode(hmac.new(secret.encode(), signed, hashlib.sha256).digest()).decode()
    )
