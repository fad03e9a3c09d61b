"""`python -m providers.upstream --port 8787`: the simulator as a process, for `make dev`.

It is a simulator: answers come from scripted responders (echo by default), not a model.
Faults and counters are driven over /_admin (see providers/upstream/admin.py).
"""

from __future__ import annotations

import argparse

import uvicorn

from providers.upstream.app import create_app
from providers.upstream.state import UpstreamState


def _setting(text: str) -> tuple[str, int]:
    model, sep, value = text.rpartition("=")
    if not sep or not model:
        raise argparse.ArgumentTypeError("expected MODEL=DIMENSIONS")
    return model, int(value)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m providers.upstream",
        description="Local upstream SIMULATOR speaking the OpenAI and Anthropic wire protocols.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8787)
    parser.add_argument(
        "--embedding-dim",
        type=_setting,
        action="append",
        default=[],
        metavar="MODEL=N",
        help="embedding dimensions for a model (repeatable; '*=N' for every model)",
    )
    parser.add_argument(
        "--api-key",
        action="append",
        default=None,
        help="accept only this key (repeatable); by default any non-empty key is accepted",
    )
    args = parser.parse_args(argv)
    state = UpstreamState(api_keys=set(args.api_key) if args.api_key else None)
    for model, dims in args.embedding_dim:
        state.configure(model, embedding_dimensions=dims)
    print(f"upstream simulator (not a real provider) on http://{args.host}:{args.port}", flush=True)
    uvicorn.run(
        create_app(state),
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=2,
    )


if __name__ == "__main__":
    main()
