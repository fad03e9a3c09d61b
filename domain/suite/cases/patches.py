"""patch-success: a unified diff that applies cleanly to a small fixture tree and makes the
case's checks pass (checked over the patched tree with `ast`/configparser, never run)."""

from __future__ import annotations

import ast
import configparser
from collections.abc import Sequence

from domain.enums import Capability
from domain.suite.cases import pycheck
from domain.suite.cases.base import Case, SingleTurnCase, say, text_only
from domain.suite.patching import unified_diff
from domain.suite.types import SuiteRequest, user
from domain.suite.verifiers.patches import Check, Tree, check_patch

SYSTEM = "You are a software engineer. You answer code change requests with patches."

MATHUTIL = '''def total(n):
    """Return the sum of the integers from 1 to n inclusive."""
    return sum(range(1, n))


def mean(values):
    return sum(values) / len(values)
'''
MATH_TEST = "from mathutil import total\n\n\ndef test_total():\n    assert total(4) == 10\n"
SETTINGS = (
    "[server]\nhost = 0.0.0.0\nport = 8080\ntimeout = 5\n\n"
    "[database]\nurl = postgres://db/app\ntimeout = 10\n"
)
USERS = 'def fetch_user(user_id):\n    return {"id": user_id}\n'
VIEWS = (
    "from app.users import fetch_user\n\n\n"
    'def profile(user_id):\n    user = fetch_user(user_id)\n    return user["id"]\n'
)
DIVIDE = (
    "def safe_divide(a, b):\n"
    '    """Divide a by b; raise ValueError when b is zero."""\n'
    "    return a / b\n"
)


def _prompt(tree: Tree, task: str) -> str:
    files = "\n".join(f"=== {path} ===\n{text}" for path, text in sorted(tree.items()))
    return (
        f"Repository files:\n\n{files}\nTask: {task}\n\nAnswer with a unified diff (git diff "
        "format, paths prefixed a/ and b/) that applies to these files, and nothing else."
    )


def _case(
    slug: str,
    tree: Tree,
    task: str,
    checks: Sequence[Check],
    reference: str,
    near: str,
) -> Case:
    request = SuiteRequest(system=SYSTEM, messages=(user(_prompt(tree, task)),), max_tokens=2048)
    return SingleTurnCase(
        f"patch-success/{slug}",
        Capability.PATCH_SUCCESS,
        request,
        text_only(lambda text: check_patch(text, tree, checks)),
        say(reference),
        say(near),
        names=[*tree, *(name for name, _ in checks)],
    )


def _sums_one_to_n(tree: Tree) -> bool:
    node = pycheck.function(tree["mathutil.py"], "total")
    expression = pycheck.returned_expression(node) if node else None
    if expression is None:
        return False
    try:
        return all(pycheck.evaluate(expression, {"n": n}) == n * (n + 1) // 2 for n in (0, 1, 4, 9))
    except pycheck.Unknown:
        return False


def _settings(tree: Tree) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(tree["config/settings.ini"])
    return parser


def _others_unchanged(tree: Tree) -> bool:
    before, after = _settings({"config/settings.ini": SETTINGS}), _settings(tree)
    pairs = {(s, k, v) for s in before.sections() for k, v in before.items(s)}
    now = {(s, k, v) for s in after.sections() for k, v in after.items(s)}
    return pairs - {("server", "timeout", "5")} == now - {("server", "timeout", "30")}


def _no_fetch_user(tree: Tree) -> bool:
    return all(
        "fetch_user" not in set(pycheck.identifiers(tree[p]))
        for p in ("app/users.py", "app/views.py")
    )


def _guards_zero(tree: Tree) -> bool:
    node = pycheck.function(tree["calc/divide.py"], "safe_divide")
    if node is None:
        return False
    accepted = {"b == 0", "0 == b", "not b", "b == 0.0", "b is 0"}
    for statement in ast.walk(node):
        if isinstance(statement, ast.If) and ast.unparse(statement.test) in accepted:
            for inner in statement.body:
                if isinstance(inner, ast.Raise) and inner.exc is not None:
                    raised = inner.exc.func if isinstance(inner.exc, ast.Call) else inner.exc
                    if isinstance(raised, ast.Name) and raised.id == "ValueError":
                        return True
    return False


def _still_divides(tree: Tree) -> bool:
    node = pycheck.function(tree["calc/divide.py"], "safe_divide")
    return node is not None and any(
        isinstance(n, ast.Return) and n.value is not None and ast.unparse(n.value) == "a / b"
        for n in ast.walk(node)
    )


def patch_success_cases() -> list[Case]:
    fixed_math = MATHUTIL.replace("range(1, n))", "range(1, n + 1))")
    guarded = DIVIDE.replace(
        "    return a / b\n",
        '    if b == 0:\n        raise ValueError("b must not be zero")\n    return a / b\n',
    )
    guard_patch = unified_diff("calc/divide.py", DIVIDE, guarded)
    math_tree = {"mathutil.py": MATHUTIL, "tests/test_mathutil.py": MATH_TEST}
    users_tree = {"app/users.py": USERS, "app/views.py": VIEWS}
    return [
        _case(
            "off-by-one",
            math_tree,
            "tests/test_mathutil.py fails. Fix the off-by-one bug in mathutil.py with a minimal "
            "change; do not change the test.",
            [
                ("total-sums-1-to-n", _sums_one_to_n),
                (
                    "mean-unchanged",
                    lambda t: pycheck.same_function(MATHUTIL, t["mathutil.py"], "mean"),
                ),
                ("test-unchanged", lambda t: t["tests/test_mathutil.py"] == MATH_TEST),
            ],
            unified_diff("mathutil.py", MATHUTIL, fixed_math),
            unified_diff("mathutil.py", MATHUTIL, MATHUTIL.replace("range(1, n))", "range(0, n))")),
        ),
        _case(
            "config-timeout",
            {"config/settings.ini": SETTINGS},
            "Raise the server timeout from 5 to 30 seconds. Leave every other setting as it is.",
            [
                ("server-timeout-30", lambda t: _settings(t).get("server", "timeout") == "30"),
                ("other-settings-unchanged", _others_unchanged),
            ],
            unified_diff(
                "config/settings.ini", SETTINGS, SETTINGS.replace("timeout = 5", "timeout = 30")
            ),
            unified_diff(
                "config/settings.ini", SETTINGS, SETTINGS.replace("timeout = 10", "timeout = 30")
            ),
        ),
        _case(
            "rename-function",
            users_tree,
            "Rename the function fetch_user to get_user everywhere in the repository.",
            [
                ("fetch_user-gone", _no_fetch_user),
                (
                    "get_user-defined",
                    lambda t: pycheck.function(t["app/users.py"], "get_user") is not None,
                ),
                (
                    "views-call-get_user",
                    lambda t: "get_user" in set(pycheck.calls(t["app/views.py"])),
                ),
            ],
            unified_diff("app/users.py", USERS, USERS.replace("fetch_user", "get_user"))
            + unified_diff("app/views.py", VIEWS, VIEWS.replace("fetch_user", "get_user")),
            unified_diff("app/users.py", USERS, USERS.replace("fetch_user", "get_user")),
        ),
        _case(
            "zero-guard",
            {"calc/divide.py": DIVIDE},
            "safe_divide must raise ValueError when b is zero, as its docstring says. Add the "
            "guard and keep the division.",
            [("raises-on-zero", _guards_zero), ("still-divides", _still_divides)],
            guard_patch,
            guard_patch.replace(" return a / b", " return a // b"),
        ),
    ]
