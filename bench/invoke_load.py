"""The load generator: one chat call along a path (directly to the upstream, through the
gateway, through LiteLLM), streaming or not, checked and timed; and a run of calls at a
concurrency, with the CPU it cost."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.invoke_config import PROFILE, PROMPT, RUN_DEADLINE_S, conc_of
from bench.invoke_meter import Meter


class BenchError(Exception):
    pass


@dataclass
class Sample:
    total: float  # seconds, request sent to last byte
    ttft: float | None  # seconds to the first non-empty content delta (stream only)


@dataclass
class Path_:
    """One way to reach the upstream: directly, through the gateway, through LiteLLM."""

    name: str
    url: str
    model: str
    headers: dict[str, str]
    client: httpx.AsyncClient
    keyed: bool = False
    # Idempotency-Key -> (total s, wall clock at send, wall clock at the end), None if it failed
    sent: dict[str, tuple[float, float, float] | None] = field(default_factory=dict)

    async def call(self, tag: str, i: int, stream: bool) -> Sample:
        content = PROMPT.format(i=f"{tag}-{i}")
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": content}],
        }
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        headers = self.headers
        key = None
        if self.keyed:
            key = f"bench-gw-{tag}-{i}"
            headers = {**headers, "Idempotency-Key": key}
            self.sent[key] = None
        expected = "Echo: " + content
        wall0 = time.time()
        t0 = time.perf_counter()
        if not stream:
            resp = await self.client.post(self.url, json=body, headers=headers)
            total = time.perf_counter() - t0
            if resp.status_code != 200:
                raise BenchError(f"{self.name}: HTTP {resp.status_code} {resp.text[:200]}")
            text = resp.json()["choices"][0]["message"]["content"]
            ttft = None
        else:
            parts: list[str] = []
            ttft = None
            done = False
            async with self.client.stream("POST", self.url, json=body, headers=headers) as resp:
                if resp.status_code != 200:
                    await resp.aread()
                    raise BenchError(f"{self.name}: HTTP {resp.status_code} {resp.text[:200]}")
                async for line in resp.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    payload = line[6:]
                    if payload == "[DONE]":
                        done = True
                        break
                    obj = json.loads(payload)
                    if "error" in obj:
                        raise BenchError(f"{self.name}: stream error {payload[:200]}")
                    for choice in obj.get("choices") or []:
                        piece = (choice.get("delta") or {}).get("content")
                        if piece:
                            if ttft is None:
                                ttft = time.perf_counter() - t0
                            parts.append(piece)
            total = time.perf_counter() - t0
            if not done:
                raise BenchError(f"{self.name}: stream ended without [DONE]")
            text = "".join(parts)
        if text != expected:
            raise BenchError(f"{self.name}: unexpected answer {text[:80]!r}")
        if key is not None:
            self.sent[key] = (total, wall0, wall0 + total)
        return Sample(total, ttft)


@dataclass
class Run:
    path: str
    scenario: str
    samples: list[Sample]
    errors: list[str]
    wall: float
    cpu: dict[str, float]  # process -> CPU seconds during the run
    machine_busy: float  # fraction of all cores busy (every process on the machine)

    @property
    def others(self) -> float:
        """Fraction of the machine used by processes this benchmark did not start."""
        capacity = self.wall * (os.cpu_count() or 1)
        ours = sum(self.cpu.values())
        return max(0.0, self.machine_busy - ours / capacity) if capacity else float("nan")


def load_client(timeout: float = 60, connections: int = 64) -> httpx.AsyncClient:
    """The load generator's client: `connections` kept open, as many as the scenario has calls
    in flight (64 covers every one), so no measured call waits for one or opens its own."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(timeout=timeout, limits=limits)


def gateway_path(name: str, port: int, token: str, client: httpx.AsyncClient) -> Path_:
    """The gateway's chat endpoint on `port`, called as the seeded tenant, a key per call."""
    return Path_(
        name,
        f"http://127.0.0.1:{port}/v1/chat/completions",
        PROFILE,
        {"Authorization": f"Bearer {token}"},
        client,
        keyed=True,
    )


def settle_client_heap() -> None:
    """Before a measured run: collect the benchmark's own heap and freeze what is left. The
    load generator is the instrument, and a full collection of its heap (the results so far)
    stops every call it is timing at once: 282 ms in one run, read as 17 streams "stalled" on
    the direct path of the 64-stream row, and as stalls on the gateway's in others (gc
    callbacks in every process of a quick run, 2026-12-01). Frozen objects are left out of
    later collections, so what a run counts is the path's, not the client's."""
    gc.collect()
    gc.freeze()


async def run_load(
    path: Path_,
    scenario: str,
    count: int,
    tag: str,
    meter: Meter | None,
    settle: Callable[[], Awaitable[None]] | None = None,
) -> Run:
    """`count` calls at the scenario's concurrency. `settle`, when given, is awaited after the
    last answer and before the meter's second reading (not in `wall`): the work a call leaves
    behind its answer is that call's."""
    stream = scenario.startswith("st")
    conc = conc_of(scenario)
    samples: list[Sample] = []
    errors: list[str] = []
    issued = 0
    deadline = time.perf_counter() + RUN_DEADLINE_S

    async def worker() -> None:
        nonlocal issued
        while issued < count and time.perf_counter() < deadline:
            i = issued
            issued += 1
            try:
                samples.append(await path.call(tag, i, stream))
            except Exception as exc:  # recorded, reported, and it fails the targets
                errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")

    settle_client_heap()
    before = meter.cpu() if meter else ({}, (0.0, 0.0))
    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(conc)))
    wall = time.perf_counter() - t0
    if settle is not None:
        await settle()
    after = meter.cpu() if meter else ({}, (0.0, 0.0))
    cpu = {k: after[0][k] - before[0].get(k, 0.0) for k in after[0]}
    total = after[1][0] - before[1][0]
    busy = (total - (after[1][1] - before[1][1])) / total if total > 0 else float("nan")
    return Run(path.name, scenario, samples, errors, wall, cpu, busy)
