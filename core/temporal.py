"""Temporal client construction: namespace, TLS / mTLS and API key from Settings."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from temporalio.client import Client
from temporalio.runtime import (
    LogForwardingConfig,
    LoggingConfig,
    Runtime,
    TelemetryConfig,
    TelemetryFilter,
)
from temporalio.service import TLSConfig

from core import tracing
from core.payload_converter import data_converter
from core.settings import Settings
from core.temporal_logs import CORE_LOGGER, ExpectedCoreWarnings


def tls_config(settings: Settings) -> TLSConfig | bool:
    """TLS when asked for, or implied by any TLS material or an API key (Temporal Cloud).

    Any configured certificate, key, CA or server name counts as asking for TLS: silently
    dropping it would connect in plaintext to a server the operator meant to verify.
    """
    wants_tls = (
        settings.temporal_tls
        or settings.temporal_tls_client_cert is not None
        or settings.temporal_tls_client_key is not None
        or settings.temporal_tls_server_ca_cert is not None
        or settings.temporal_tls_server_name is not None
        or settings.temporal_api_key is not None
    )
    if not wants_tls:
        return False
    cert = settings.temporal_tls_client_cert
    key = settings.temporal_tls_client_key
    if (cert is None) != (key is None):
        raise ValueError("temporal_tls_client_cert and temporal_tls_client_key go together")
    ca = settings.temporal_tls_server_ca_cert
    return TLSConfig(
        server_root_ca_cert=ca.read_bytes() if ca else None,
        client_cert=cert.read_bytes() if cert else None,
        client_private_key=key.read_bytes() if key else None,
        domain=settings.temporal_tls_server_name,
    )


def core_logs() -> logging.Logger:
    """The logger Core's lines are forwarded to, less the warnings this product expects
    (`core/temporal_logs.py`)."""
    logger = logging.getLogger(CORE_LOGGER)
    if not any(isinstance(f, ExpectedCoreWarnings) for f in logger.filters):
        logger.addFilter(ExpectedCoreWarnings())
    return logger


@functools.cache
def _runtime() -> Runtime:
    """One SDK runtime per process whose Core (Rust) log lines go to Python logging (logger
    `temporalio.core`), so they are JSON like every other line instead of Core's own coloured
    text on stderr."""
    return Runtime(
        telemetry=TelemetryConfig(
            logging=LoggingConfig(
                filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
                forwarding=LogForwardingConfig(logger=core_logs()),
            )
        )
    )


def client_options(settings: Settings) -> dict[str, Any]:
    options: dict[str, Any] = {
        "runtime": _runtime(),
        "namespace": settings.temporal_namespace,
        "data_converter": data_converter,
        "tls": tls_config(settings),
        # Carries the caller's trace into workflows and activities (ids only, never payloads).
        "interceptors": tracing.interceptors(),
    }
    if settings.temporal_api_key is not None:
        options["api_key"] = settings.temporal_api_key.get_secret_value()
    return options


async def connect(settings: Settings) -> Client:
    return await asyncio.wait_for(
        Client.connect(settings.temporal_address, **client_options(settings)),
        timeout=settings.temporal_connect_timeout_seconds,
    )
