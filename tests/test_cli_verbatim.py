"""What the CLI prints is the text it was given: an id's `:x:` or `:smile:` was read by rich as
an emoji code (a deployment id may hold colons: `team:smile:prod` came out as "team😄prod"), and
a message on a piped stderr was hard-wrapped mid-sentence ("Request URL has an" / "unsupported
protocol"), which a script grepping for it missed."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.helpers.catalog import deployment_body
from tests.helpers.cli import run

# Emoji codes rich knows (❌, 😄, 🅰), each inside one id the API takes.
EMOJI_IDS = ("it:x:one", "team:smile:prod", "it:a:b")


def piped(env: dict[str, str], columns: str | None = "40") -> dict[str, str | None]:
    """The CLI's environment as a pipe sees it, COLUMNS narrow: without the fix rich laid out a
    piped stderr at that width (at 80 when unset)."""
    return {**env, "COLUMNS": columns, "FORCE_COLOR": None, "TTY_COMPATIBLE": None}


def lines_with(text: str, needle: str) -> list[str]:
    return [line for line in text.splitlines() if needle in line]


async def test_ids_with_emoji_codes_are_printed_as_they_are(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    for deployment_id in EMOJI_IDS:
        spec = tmp_path / "deployment.yaml"
        spec.write_text(yaml.safe_dump(deployment_body(deployment_id, licenseMetadata=None)))
        registered = await run(cli_env, "deployments", "register", str(spec))
        assert registered.exit_code == 0, registered.output
        assert f"registered {deployment_id} (Candidate)" in registered.stdout, registered.stdout

    listed = await run(piped(cli_env), "deployments", "list")
    assert listed.exit_code == 0, listed.output
    for deployment_id in EMOJI_IDS:
        assert lines_with(listed.stdout, deployment_id), listed.stdout

    # On stderr as well: retire without --yes names the id, and changes nothing.
    refused = await run(piped(cli_env), "deployments", "retire", "it:x:one")
    assert refused.exit_code == 2, refused.output
    said = "deployments retire it:x:one would retire it for good"
    assert lines_with(refused.stderr, said), refused.stderr


async def test_a_long_error_on_a_piped_stderr_is_one_line(cli_env: dict[str, str]) -> None:
    env = {**cli_env, "MODEL_ROUTER_API_URL": "ftp://127.0.0.1:9/model-router"}
    result = await run(piped(env), "deployments", "list")
    assert result.exit_code == 2, result.output
    said = (
        "Cannot reach the API at ftp://127.0.0.1:9/model-router: UnsupportedProtocol: "
        "Request URL has an unsupported protocol 'ftp://'."
    )
    assert lines_with(result.stderr, said), result.stderr

    # Unset, COLUMNS left rich its 80 columns: the same.
    result = await run(piped(env, columns=None), "deployments", "list")
    assert result.exit_code == 2, result.output
    assert lines_with(result.stderr, said), result.stderr
