"""Invocation settings as the API process applies them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class InvokeConfig:
    workflow_queue: str  # shared: the API's in-process workers and the standalone worker poll it
    caller_queue: str  # this process's own queue, for calls that must run where the request is
    timeout_seconds: float
    workflow_timeout: timedelta  # InvokeModel's execution timeout (domain/sweep.py)
