"""Keeps the provider SDKs' debug logging from carrying prompts.

The anthropic SDK logs every request's options, body included, at DEBUG. Whatever level a
deployment configures, those records are dropped at their logger, before any handler sees
them.
"""

from __future__ import annotations

import logging

_SDK_LOGGERS = ("anthropic._base_client", "openai._base_client")
_CONTENT_MESSAGES = ("Request options",)


class _DropRequestBodies(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(_CONTENT_MESSAGES))


_GUARD = _DropRequestBodies()


def install() -> None:
    """Idempotent; adapters call it when they are built."""
    for name in _SDK_LOGGERS:
        logger = logging.getLogger(name)
        if _GUARD not in logger.filters:
            logger.addFilter(_GUARD)
