"""The README's CLI table names only commands, flags and positional arguments that the CLI has,
and every command the CLI has is in it: an operator copies these lines, so a renamed flag or an
argument that became an option (`db upgrade REV` once) must fail here, not at 3 a.m."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer.main

from cli.main import app

README = Path(__file__).resolve().parents[1] / "README.md"


def cli_table_forms() -> list[str]:
    """Every command form written in the first cell of the README's CLI table."""
    text = README.read_text()
    table = text.split("| Command | What it does |", 1)[1].split("\n\n", 1)[0]
    forms = []
    for line in table.splitlines()[2:]:
        first_cell = re.split(r"(?<!\\)\|", line)[1]
        forms.extend(re.findall(r"`([^`]+)`", first_cell))
    return forms


def leaves(cmd: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Every runnable command under cmd, by its path of names."""
    if not hasattr(cmd, "commands"):
        return {path: cmd}
    found: dict[tuple[str, ...], Any] = {}
    for name, sub in cmd.commands.items():
        if not getattr(sub, "hidden", False):
            found.update(leaves(sub, (*path, name)))
    return found


COMMANDS = leaves(typer.main.get_command(app))


def resolve(words: list[str], group: tuple[str, ...]) -> tuple[tuple[str, ...], list[str]]:
    """The command a form names and the words after it. A form without `model-router` in front
    (`show ID` after `deployments list`) continues the previous form's group."""
    for prefix in ((), group):
        for size in range(len(words), 0, -1):
            path = (*prefix, *words[:size])
            if path in COMMANDS:
                return path, words[size:]
    raise AssertionError(f"README names a command the CLI lacks: {' '.join(words)!r}")


def check_form(form: str, group: tuple[str, ...]) -> tuple[str, ...]:
    """Assert one form's flags and positional arguments match the command's; return its path."""
    words = form.replace("\\|", " ").replace("[", " ").replace("]", " ").split()
    if words[0] == "model-router":
        words = words[1:]
    path, rest = resolve(words, group)
    options = {
        opt: param
        for param in COMMANDS[path].params
        if param.param_type_name == "option"
        for opt in (*param.opts, *param.secondary_opts)
    }
    arguments = [p for p in COMMANDS[path].params if p.param_type_name == "argument"]
    positional = []
    tokens = iter(rest)
    for token in tokens:
        if token.startswith("--"):
            assert token in options, f"`{form}`: {' '.join(path)} has no {token}"
            if not options[token].is_flag:
                next(tokens, None)  # its value
        elif token.strip("…"):
            positional.append(token)
    assert len(positional) == len(arguments), (
        f"`{form}`: README shows {positional} as positional, "
        f"the command takes {[a.name for a in arguments]}"
    )
    return path


def test_the_cli_table_names_every_command_with_real_flags_and_arguments() -> None:
    documented = set()
    group: tuple[str, ...] = ()
    for form in cli_table_forms():
        path = check_form(form, group)
        documented.add(path)
        group = path[:-1]
    missing = sorted(" ".join(p) for p in set(COMMANDS) - documented)
    assert not missing, f"commands missing from the README's CLI table: {missing}"


def test_a_positional_argument_that_is_an_option_is_caught() -> None:
    """The check itself: the README's old `db upgrade [REV]` fails it."""
    try:
        check_form("model-router db upgrade [REV]", ())
    except AssertionError as error:
        assert "positional" in str(error)
    else:
        raise AssertionError("`db upgrade [REV]` passed, but upgrade takes --revision")
