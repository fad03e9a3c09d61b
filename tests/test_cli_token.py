"""`MODEL_ROUTER_TOKEN`: a bearer token the CLI sends as it is, before any client credentials,
for an API whose tokens an external issuer signs (the CLI could only sign in at the API's own
/oauth/token). A token the API refuses is said to be that token, in words."""

from __future__ import annotations

import json

import httpx
import jwt

from tests.helpers.cli import cli_token, run


async def test_a_given_token_is_used_as_it_is(
    cli_env: dict[str, str], http: httpx.AsyncClient, tenant: str
) -> None:
    token = await cli_token(http, cli_env)
    only_token = {
        "MODEL_ROUTER_API_URL": cli_env["MODEL_ROUTER_API_URL"],
        "MODEL_ROUTER_CLIENT_ID": None,
        "MODEL_ROUTER_CLIENT_SECRET": None,
        "MODEL_ROUTER_TOKEN": token,
    }
    listed = await run(only_token, "deployments", "list", "--json")
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.stdout) == []
    preview = await run(only_token, "route", "preview", "none", "--tenant", "someone-else")
    assert preview.exit_code == 2 and tenant in preview.stderr  # the token's tenant, read

    # Before the client's credentials: these would be refused.
    both = {**cli_env, "MODEL_ROUTER_CLIENT_SECRET": "wrong", "MODEL_ROUTER_TOKEN": token}
    assert (await run(both, "profiles", "list")).exit_code == 0

    forged = jwt.encode({"tid": tenant, "sub": "x"}, "not-the-key" * 4, algorithm="HS256")
    refused = await run({**only_token, "MODEL_ROUTER_TOKEN": forged}, "profiles", "list")
    assert refused.exit_code == 1, refused.output
    said = " ".join(refused.stderr.split())
    assert "401" in said and "The API refused MODEL_ROUTER_TOKEN" in said, said
    assert "Traceback" not in refused.output

    garbage = await run({**only_token, "MODEL_ROUTER_TOKEN": "not-a-token"}, "profiles", "list")
    assert garbage.exit_code == 2, garbage.output
    assert "MODEL_ROUTER_TOKEN is not a JWT" in garbage.stderr
    assert "Traceback" not in garbage.output

    neither = await run({**only_token, "MODEL_ROUTER_TOKEN": None}, "profiles", "list")
    assert neither.exit_code == 2 and "MODEL_ROUTER_TOKEN" in neither.stderr
