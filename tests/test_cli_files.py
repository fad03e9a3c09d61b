"""A FILE the CLI cannot send as JSON (`deployments register`, `profiles publish`) is refused
before any request, naming the file and the problem, with exit 2: a non-UTF-8 file, `.nan`,
`!!binary`, `!!set` and a number beside text keys each ended in a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.helpers.catalog import deployment_body
from tests.helpers.cli import run

VALID = yaml.safe_dump(deployment_body("files/ok"))

BAD = {
    "not-utf8": (VALID.encode() + b"region: caf\xe9\n", "not UTF-8"),
    "nan": (VALID.encode() + b"contextWindowTokens: .nan\n", "contextWindowTokens: nan"),
    "inf": (VALID.encode() + b"extra: {cost: -.inf}\n", "extra.cost: -inf"),
    "binary": (VALID.encode() + b"blob: !!binary aGVsbG8=\n", "blob: binary data"),
    "set": (VALID.encode() + b"tags: !!set {a, b}\n", "tags: a set"),
    "mixed-keys": (b"1: a\nb: c\n", "key 1 is not text"),
    "self-alias": (b"a: &x [1, *x]\n", "contains itself"),
    "not-a-mapping": (b"- one\n- two\n", "not a mapping"),
    "empty": (b"", "empty"),
}


@pytest.mark.parametrize("name", list(BAD))
async def test_a_file_that_is_not_json_is_refused_naming_the_file_and_the_problem(
    cli_env: dict[str, str], tmp_path: Path, name: str
) -> None:
    content, problem = BAD[name]
    file = tmp_path / f"{name}.yaml"
    file.write_bytes(content)
    for command in (("deployments", "register"), ("profiles", "publish")):
        result = await run(cli_env, *command, str(file))
        said = " ".join(result.stderr.split())
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert str(file) in said and problem in said, said
    listed = await run(cli_env, "deployments", "list", "--json")
    assert listed.exit_code == 0 and listed.stdout.strip() == "[]"  # nothing was registered
