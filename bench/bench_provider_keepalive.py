"""What a provider call a few seconds after the last one costs when its connection was kept,
against when it was not: the OpenAI adapter (aiohttp, as the product sends) streaming from the
upstream simulator over TLS, in a process of its own, with calls `--gap` seconds apart. With
the SDKs' 5 s keep-alive a call 5.5 s after the last opens a new connection (a TCP and a TLS
handshake); with the product's (`provider_keepalive_seconds`, 120 s) it reuses the last.

Loopback has no round trip to speak of: to a hosted provider the new connection also costs two
round trips (TCP, then TLS 1.3), which this cannot show. Needs the `openssl` command (a
throwaway self-signed certificate for 127.0.0.1).

Run: .venv/bin/python bench/bench_provider_keepalive.py [--gap 5.5] [--calls 16]
(prints its table; docs/benchmarks.md quotes it where the default was decided)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.child_process import port_open  # noqa: E402
from core.local_ports import free_port  # noqa: E402
from providers.completion_fold import collect_stream  # noqa: E402
from providers.openai_adapter import OpenAIAdapter  # noqa: E402
from providers.secrets import Connection  # noqa: E402
from providers.types import ChatRequest, Message, ProviderTimeouts  # noqa: E402

REQUEST = ChatRequest(messages=(Message(role="user", content="hello there, how are you today"),))
SDK_KEEPALIVE, PRODUCT_KEEPALIVE = 5.0, 120.0


def certificate(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            *(
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
            ),
            *("-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


async def measure(
    port: int, gap: float, calls: int
) -> dict[float, tuple[list[float], list[float]]]:
    """Wall and CPU milliseconds of each call, per keep-alive; the two adapters alternate, and
    each call comes `gap` seconds after that adapter's last."""
    adapters = {
        keepalive: OpenAIAdapter(
            model="keepalive",
            connection=Connection(api_key="k", base_url=f"https://127.0.0.1:{port}/v1"),
            timeouts=ProviderTimeouts(connect=5, read=30, keepalive=keepalive),
        )
        for keepalive in (SDK_KEEPALIVE, PRODUCT_KEEPALIVE)
    }
    results: dict[float, tuple[list[float], list[float]]] = {k: ([], []) for k in adapters}
    try:
        for adapter in adapters.values():
            await collect_stream(adapter.stream(REQUEST))  # each opens its first connection
        for i in range(calls):
            order = list(adapters) if i % 2 == 0 else list(reversed(adapters))
            for keepalive in order:
                await asyncio.sleep(gap / 2)  # the idle spell between an adapter's calls
                wall, cpu = time.perf_counter(), time.process_time()
                await collect_stream(adapters[keepalive].stream(REQUEST))
                results[keepalive][0].append((time.perf_counter() - wall) * 1000)
                results[keepalive][1].append((time.process_time() - cpu) * 1000)
    finally:
        for adapter in adapters.values():
            await adapter.aclose()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gap", type=float, default=5.5)
    parser.add_argument("--calls", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mr-keepalive.") as tmp:
        cert, key = certificate(Path(tmp))
        # The client trusts the throwaway certificate (aiohttp's default context reads it).
        os.environ["SSL_CERT_FILE"] = str(cert)
        port = free_port()
        server = subprocess.Popen(
            [
                *(
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "providers.upstream.app:create_app",
                    "--factory",
                ),
                *("--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"),
                *("--ssl-keyfile", str(key), "--ssl-certfile", str(cert)),
                *("--timeout-keep-alive", "300"),
            ],
            cwd=ROOT,
        )
        try:
            deadline = time.monotonic() + 30
            while not port_open(port):
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the simulator did not start")
                time.sleep(0.1)
            results = asyncio.run(measure(port, args.gap, args.calls))
        finally:
            server.terminate()
            server.wait()
    print(f"{args.calls} streamed answers per keep-alive, {args.gap} s apart, over TLS on loopback")
    print("| keep-alive (s) | wall p50 (min-max) ms | CPU p50 ms |")
    print("|---:|---|---:|")
    for keepalive, (wall, cpu) in results.items():
        print(
            f"| {keepalive:g} | {statistics.median(wall):.2f} ({min(wall):.2f}-{max(wall):.2f}) "
            f"| {statistics.median(cpu):.2f} |"
        )


if __name__ == "__main__":
    main()
