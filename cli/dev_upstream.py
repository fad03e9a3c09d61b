"""The local upstream SIMULATOR as `make dev` runs it: every model answers the capability suite
competently (so the demo catalog passes evaluation); anything else gets the default simulator
answer, except that offered several tools it calls them in parallel, as its evidence
(parallel-tool-calling 1.00) claims. Not a model."""

from __future__ import annotations

import logging
import sys

import uvicorn

from core.logging import configure_logging
from domain.suite import Suite
from providers.upstream.app import create_app
from providers.upstream.responders import parallel_tools_responder
from providers.upstream.state import UpstreamState
from providers.upstream.suite_responders import competent_responder


def main(port: int) -> None:
    configure_logging("INFO")  # upstream.log is JSON lines too, uvicorn's included
    state = UpstreamState()
    # Beyond the suite, the demo model does what its evidence says (parallel tool calls).
    state.register("*", competent_responder(Suite(), otherwise=parallel_tools_responder))
    logging.getLogger("model_router.dev").info(
        "upstream simulator (not a real provider) on http://127.0.0.1:%s", port
    )
    uvicorn.run(
        create_app(state),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        log_config=None,
        access_log=False,
    )


if __name__ == "__main__":
    main(int(sys.argv[1]))
