"""What the invoke benchmark sends and how much of it: the tenant, profile, deployment and model
names, the prompt, the scenarios with their call counts, and the time and load limits."""

from __future__ import annotations

import secrets
from pathlib import Path

from core.settings import Settings

START, END = "<!-- bench:invoke:start -->", "<!-- bench:invoke:end -->"
TENANT = "bench-invoke"
PROFILE = "chat"
DEPLOYMENT = "sim/gateway"
# One upstream model name per path, so the simulator's counters tell the paths apart.
MODEL_DIRECT, MODEL_GATEWAY, MODEL_LITELLM, MODEL_PROBE = (
    "sim-direct",
    "sim-gateway",
    "sim-litellm",
    "sim-probe",
)
DEFAULT_LITELLM = Path("/tmp/litellm-venv/bin/litellm")
LITELLM_KEY = "sk-bench-" + secrets.token_hex(8)
PROMPT = (
    "Summarise ticket {i}: the nightly build went red after the dependency bump; list the "
    "likely causes and the first three checks to run."
)
SCENARIOS = ("ns1", "st1", "ns16", "st16")  # non-stream / stream at concurrency 1 / 16
FULL = {"ns1": 200, "st1": 120, "ns16": 640, "st16": 320}
QUICK = {"ns1": 40, "st1": 30, "ns16": 160, "st16": 96}
WARMUP = {"ns1": 20, "st1": 10, "ns16": 64, "st16": 32}
RUN_DEADLINE_S = 20.0  # a measured run stops issuing calls after this (bounds the whole run)
PROBE_CALLS = 80
POOL_SIZE = Settings.model_fields["database_pool_size"].default
PACED_CALLS = 40
LOAD_LIMIT = 1.5


def conc_of(scenario: str) -> int:
    return 16 if scenario.endswith("16") else 1
