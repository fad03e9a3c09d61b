"""Patch verifier: the answer's unified diff applies cleanly to the fixture tree, and every
check of the case passes on the patched tree."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise

from domain.suite.patching import PatchError, apply_patch
from domain.suite.reasons import Failure, Why, fail

Tree = Mapping[str, str]
Check = tuple[str, Callable[[Tree], bool]]


def extract_patch(text: str) -> str:
    """The diff inside the answer's code fences (models fence diffs even when told not to, and
    a fence is formatting, not a different patch): every fenced block that holds a diff, in
    order, joined, so a multi-file patch fenced file by file is one patch. With no fenced diff,
    the first fence's text; with no fence, the whole text. Plain string search, not a regular
    expression: linear on any answer."""
    blocks = _fenced_blocks(text)
    if not blocks:
        return text
    diffs = [block for block in blocks if _holds_diff(block)]
    if not diffs:
        return blocks[0]
    return "".join(block if block.endswith("\n") else f"{block}\n" for block in diffs)


def _fenced_blocks(text: str) -> list[str]:
    """The text of each ``` fence, in order; an unclosed last fence runs to the end (an answer
    cut short). An unclosed first fence is no fence at all, as the whole text is its text."""
    blocks: list[str] = []
    at = 0
    while (start := text.find("```", at)) >= 0:
        body = text.find("\n", start)
        if body < 0:
            break
        end = text.find("```", body + 1)
        if end < 0:
            if blocks:
                blocks.append(text[body + 1 :])
            break
        blocks.append(text[body + 1 : end])
        at = end + 3
    return blocks


def _holds_diff(block: str) -> bool:
    """A `--- ` line directly followed by a `+++ ` line: a file header of a unified diff."""
    lines = block.split("\n")
    return any(old.startswith("--- ") and new.startswith("+++ ") for old, new in pairwise(lines))


def patched_tree(text: str, tree: Tree) -> dict[str, str] | Failure:
    try:
        return apply_patch(tree, extract_patch(text))
    except PatchError as error:
        path = error.path or ""
        if error.kind == "empty":
            return fail(Why.PATCH_EMPTY)
        if error.kind == "unknown-file":
            return fail(Why.PATCH_UNKNOWN_FILE, path)
        if error.kind == "exists":
            return fail(Why.PATCH_FILE_EXISTS, path)
        if error.kind == "context":
            return fail(Why.PATCH_CONTEXT, path)
        return fail(Why.PATCH_MALFORMED)


def run_checks(tree: Tree, checks: Sequence[Check]) -> Failure | None:
    for name, check in checks:
        try:
            passed = check(tree)
        except (SyntaxError, ValueError, KeyError, TypeError, RecursionError):
            passed = False
        if not passed:
            return fail(Why.CHECK_FAILED, name)
    return None


def check_patch(text: str, tree: Tree, checks: Sequence[Check]) -> Failure | None:
    result = patched_tree(text, tree)
    if isinstance(result, Failure):
        return result
    return run_checks(result, checks)
