"""What Temporal Core logs that this product expects, kept out of the operator's warnings.

Core warns `TMPRL1104` ("Workflow task duration exceeded 5 seconds") for every workflow task
that stays open that long. InvokeModel's first task stays open for as long as its call runs:
its one local activity adopts the call in flight and awaits its outcome (DESIGN §5), and Core
keeps the task alive past its timeout while a local activity runs. So every stream longer than
5 s logged a warning, one per call (a 7 s stream through a real API process, 2026-12-04) —
noise that reads like a stuck worker, on agent calls that routinely stream for a minute. The
same warning from any other workflow is kept: there it does mean a task that held on.
"""

from __future__ import annotations

import logging
from typing import Any

from domain.invocation import INVOKE_WORKFLOW

LONG_TASK = "TMPRL1104"
# Where core/temporal.py forwards Core's log lines.
CORE_LOGGER = "temporalio.core"


class ExpectedCoreWarnings(logging.Filter):
    """Drops Core's long-task warning for InvokeModel (kept when the logger is at DEBUG)."""

    def filter(self, record: logging.LogRecord) -> bool:
        entry: Any = record.__dict__.get("temporal_log")
        if entry is None or LONG_TASK not in record.getMessage():
            return True
        fields = getattr(entry, "fields", None)
        if not isinstance(fields, dict) or fields.get("workflow_type") != INVOKE_WORKFLOW:
            return True
        return logging.getLogger(CORE_LOGGER).isEnabledFor(logging.DEBUG)
