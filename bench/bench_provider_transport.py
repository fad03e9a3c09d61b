"""The provider call alone, under the SDK's two HTTP transports: process CPU per answer and wall
p50 of the product's adapters (providers/), driven as the invoke activity drives them
(activities.resilience.timed_stream), against the upstream simulator in a process of its own
so that its CPU is not counted.

Issue 14 asked whether the SDKs' optional aiohttp transport (`openai.DefaultAioHttpClient`,
`anthropic.DefaultAioHttpClient`) costs the API less CPU per call than their default httpx2
client. Each cell is one adapter, transport and concurrency: a warm-up, then `--calls` streamed
~35-token answers (or embeddings), CPU as time.process_time() over the cell divided by the
calls. The transports alternate within each round and the rounds repeat, as the host's speed
drifts (bench/machine_speed.py).

Run: /work/wt/benchslot .venv/bin/python bench/bench_provider_transport.py [--calls 300]
[--rounds 3] [--concurrency 1,16] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from activities.resilience import call_limits, timed_stream  # noqa: E402
from bench.child_process import port_open  # noqa: E402
from bench.invoke_config import PROMPT  # noqa: E402
from core.local_ports import free_port  # noqa: E402
from core.settings import Settings  # noqa: E402
from domain.invocation import AttemptTimeouts  # noqa: E402
from providers.anthropic_adapter import AnthropicAdapter  # noqa: E402
from providers.base import ProviderAdapter  # noqa: E402
from providers.openai_adapter import OpenAIAdapter  # noqa: E402
from providers.secrets import Connection  # noqa: E402
from providers.transport import HttpTransport  # noqa: E402
from providers.types import ChatRequest, Finish, Message, ProviderTimeouts, TextDelta  # noqa: E402

TRANSPORTS: tuple[HttpTransport, ...] = ("httpx2", "aiohttp")
PATHS = ("openai-stream", "anthropic-stream", "openai-embed")
_SETTINGS = Settings.model_fields
TIMEOUTS = ProviderTimeouts(
    connect=_SETTINGS["provider_connect_timeout_seconds"].default,
    read=_SETTINGS["provider_read_timeout_seconds"].default,
)


@dataclass
class Cell:
    round: int
    path: str
    transport: str
    concurrency: int
    calls: int
    cpu_ms_per_call: float
    wall_p50_ms: float
    wall_s: float


def adapter_for(path: str, transport: HttpTransport, port: int) -> ProviderAdapter:
    base = f"http://127.0.0.1:{port}"
    key = Connection.model_validate({"api_key": "sk-bench-transport", "base_url": base})
    if path.startswith("openai"):
        return OpenAIAdapter(
            model="sim-transport", connection=key, timeouts=TIMEOUTS, transport=transport
        )
    return AnthropicAdapter(
        model="sim-transport", connection=key, timeouts=TIMEOUTS, transport=transport
    )


def one_call(path: str, adapter: ProviderAdapter) -> Callable[[int], Awaitable[None]]:
    attempt = AttemptTimeouts()

    async def stream(i: int) -> None:
        request = ChatRequest(messages=[Message(role="user", content=PROMPT.format(i=i))])
        text, finished = 0, False
        async for event in timed_stream(adapter, request, attempt, attempt.attempt):
            if isinstance(event, TextDelta):
                text += 1
            elif isinstance(event, Finish):
                finished = True
        if not finished or text < 20:
            raise RuntimeError(f"{path}: an answer of {text} deltas, finished={finished}")

    async def embed(i: int) -> None:
        result = await adapter.embed(
            [PROMPT.format(i=i), PROMPT.format(i=-i)], limits=call_limits(attempt)
        )
        if len(result.vectors) != 2:
            raise RuntimeError("openai-embed: wrong number of vectors")

    return embed if path.endswith("embed") else stream


async def run_cell(
    path: str,
    transport: HttpTransport,
    concurrency: int,
    calls: int,
    warmup: int,
    port: int,
    rnd: int,
) -> Cell:
    adapter = adapter_for(path, transport, port)
    call = one_call(path, adapter)
    walls: list[float] = []

    async def worker(indices: range, record: bool) -> None:
        for i in indices:
            start = time.perf_counter()
            await call(i)
            if record:
                walls.append(time.perf_counter() - start)

    async def load(n: int, record: bool) -> None:
        await asyncio.gather(
            *(worker(range(w, n, concurrency), record) for w in range(concurrency))
        )

    try:
        await load(warmup, record=False)
        gc.collect()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        await load(calls, record=True)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    finally:
        await adapter.aclose()
    return Cell(
        round=rnd,
        path=path,
        transport=transport,
        concurrency=concurrency,
        calls=calls,
        cpu_ms_per_call=round(cpu * 1000 / calls, 3),
        wall_p50_ms=round(statistics.median(walls) * 1000, 3),
        wall_s=round(wall, 2),
    )


async def bench(args: argparse.Namespace, port: int) -> list[Cell]:
    cells: list[Cell] = []
    for rnd in range(1, args.rounds + 1):
        # Alternate which transport goes first, so a drift in the host's speed within a round
        # does not always favour the same one.
        order = TRANSPORTS if rnd % 2 else TRANSPORTS[::-1]
        for path in args.paths:
            for concurrency in args.concurrency:
                for transport in order:
                    cell = await run_cell(
                        path, transport, concurrency, args.calls, args.warmup, port, rnd
                    )
                    cells.append(cell)
                    print(
                        f"round {rnd} {path:17} c={concurrency:<3} {transport:8} "
                        f"cpu {cell.cpu_ms_per_call:7.3f} ms/call  p50 {cell.wall_p50_ms:7.3f} ms"
                        f"  ({cell.wall_s:.1f} s)",
                        flush=True,
                    )
    return cells


def summary(cells: list[Cell], args: argparse.Namespace) -> str:
    lines = [
        "| path | c | httpx2 CPU ms/call (rounds) | aiohttp CPU ms/call (rounds) | CPU change "
        "(median) | httpx2 p50 ms | aiohttp p50 ms |",
        "|---|---:|---|---|---:|---:|---:|",
    ]
    for path in args.paths:
        for c in args.concurrency:

            def of(t: str, field: str, path: str = path, c: int = c) -> list[float]:
                return [
                    getattr(x, field)
                    for x in cells
                    if x.path == path and x.concurrency == c and x.transport == t
                ]

            base, alt = of("httpx2", "cpu_ms_per_call"), of("aiohttp", "cpu_ms_per_call")
            change = statistics.median(alt) / statistics.median(base) - 1
            lines.append(
                f"| {path} | {c} | {' / '.join(f'{v:.2f}' for v in base)} | "
                f"{' / '.join(f'{v:.2f}' for v in alt)} | {change:+.0%} | "
                f"{statistics.median(of('httpx2', 'wall_p50_ms')):.2f} | "
                f"{statistics.median(of('aiohttp', 'wall_p50_ms')):.2f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.paths = [p for p in args.paths.split(",") if p]
    # An aiohttp session left open warns at exit: make that loud here.
    warnings.simplefilter("error", ResourceWarning)
    port = free_port()
    upstream = subprocess.Popen(
        [sys.executable, "-m", "providers.upstream", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not port_open(port):
            if upstream.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the upstream simulator did not start")
            time.sleep(0.1)
        try:
            import uvloop  # the API runs on uvloop (uvicorn picks it when installed)

            cells = uvloop.run(bench(args, port))
            loop = "uvloop"
        except ImportError:
            cells = asyncio.run(bench(args, port))
            loop = "asyncio"
    finally:
        upstream.terminate()
        upstream.wait(10)
    print(
        f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {loop}, {args.calls} calls "
        f"per cell after {args.warmup} warm-up, {args.rounds} rounds\n"
    )
    print(summary(cells, args))
    if args.json:
        args.json.write_text(json.dumps([asdict(c) for c in cells], indent=1))


if __name__ == "__main__":
    main()
