"""The switches every Temporal dev server this project starts runs with: `make dev`'s embedded
default (cli/dev.py), the test suite's (scripts/test.sh, tests/helpers/stack.py) and the
benchmark's (bench/invoke_stack.py). One list, so that the three run the same server.

`temporal server start-dev` turns on `system.forceSearchAttributesCacheRefreshOnRead`, so that
a custom search attribute can be used the moment it is created. A production server leaves it
off and refreshes that cache once a minute. The product defines no custom search attribute, so
here the switch only costs: every read of the search attributes becomes a database read. That
is about four reads per InvokeModel (the cluster's metadata twice and the namespace once in the
frontend, the metadata once in history), besides the three that create, load and close the
workflow. The server's persistence metrics show it
(`persistence_requests`, GetCurrentClusterMetadata and GetNamespace).

Measured on a fresh in-memory dev server, 2026-12-03, alternating default and off:
- one invocation at a time (600 calls, three pairs): the eager start's reply p50 3.5 / 3.5 /
  4.5 ms off against 5.2 / 3.9 / 5.0 by default, p75 7.3 / 6.4 / 8.0 against 10.3 / 9.1 / 10.3;
- InvokeModel alone 16 at a time (`bench/invoke_ceiling.py`, seven runs alternating): 9.0 dev
  server CPU ms per invocation off against 9.6 by default (docs/benchmarks.md, sixteenth pass);
  on a file-backed server as `make dev` starts it, 14.8 and 13.8 against 16.7 and 15.0.
"""

from __future__ import annotations

# JSON values, as `--dynamic-config-value KEY=VALUE` takes them.
DYNAMIC_CONFIG: dict[str, str] = {
    "system.forceSearchAttributesCacheRefreshOnRead": "false",
    # As a server on SQL visibility refuses longer ids (deploy/temporal/dynamicconfig.yaml):
    # the dev server's own limit (1000) let ids pass here that production refused.
    "limit.maxIDLength": "255",
}


def dynamic_config_args() -> list[str]:
    """`temporal server start-dev` arguments for `DYNAMIC_CONFIG`."""
    return [
        arg
        for key, value in DYNAMIC_CONFIG.items()
        for arg in ("--dynamic-config-value", f"{key}={value}")
    ]


if __name__ == "__main__":
    # scripts/test.sh reads the arguments from here, one a line.
    print("\n".join(dynamic_config_args()))
