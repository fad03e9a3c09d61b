"""Standard Webhooks signing (`activities/webhook_signing.py`): new secrets are the standard's
form and sign as its library verifies; a secret issued before keeps its old signature."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from activities.webhook_signing import new_secret, sign


def test_a_new_secret_is_32_random_bytes_in_the_standard_form() -> None:
    secret = new_secret()
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32
    assert new_secret() != secret


def test_a_signature_verifies_with_the_standard_library_and_not_with_another_secret() -> None:
    secret, body, ts = new_secret(), b'{"id":"e-1"}', int(time.time())
    headers = {
        "webhook-id": "e-1",
        "webhook-timestamp": str(ts),
        "webhook-signature": sign(secret, "e-1", ts, body),
    }
    Webhook(secret).verify(body, headers, json_parse=False)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(body, headers, json_parse=False)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(b'{"id":"e-2"}', headers, json_parse=False)


def test_a_secret_issued_before_the_standard_key_keeps_its_signature() -> None:
    legacy = "whsec_" + secrets.token_urlsafe(32)
    body, ts = b'{"id":"e-1"}', 1_700_000_000
    expected = hmac.new(legacy.encode(), f"e-1.{ts}.".encode() + body, hashlib.sha256).digest()
    assert sign(legacy, "e-1", ts, body) == "v1," + base64.b64encode(expected).decode()
