"""Patch verifier: the answer's unified diff applies cleanly to the fixture tree, and every
check of the case passes on the patched tree."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from domain.suite.patching import PatchError, apply_patch
from domain.suite.reasons import Failure, Why, fail

Tree = Mapping[str, str]
Check = tuple[str, Callable[[Tree], bool]]


def extract_patch(text: str) -> str:
    """The diff inside the first code fence when there is one (models fence diffs even when
    told not to, and a fence is formatting, not a different patch); else the whole text.
    Plain string search, not a regular expression: linear on any answer."""
    start = text.find("```")
    if start < 0:
        return text
    body = text.find("\n", start)
    end = text.find("```", body + 1) if body >= 0 else -1
    return text[body + 1 : end] if end >= 0 else text


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
