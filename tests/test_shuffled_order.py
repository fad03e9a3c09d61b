"""The opt-in shuffled order (tests/helpers/shuffled_order.py): the same seed gives the same
order in every process, another seed another order, and without a seed pytest's own."""

from __future__ import annotations

from typing import Any, cast

import pytest

from tests.helpers import shuffled_order

ITEMS = [f"tests/test_{n}.py::test_{n}" for n in range(50)]


def _shuffled(seed: int) -> list[str]:
    items = list(ITEMS)
    shuffled_order.shuffled(cast(list[Any], items), seed)
    return items


def test_one_seed_one_order_and_every_test_kept() -> None:
    assert _shuffled(7) == _shuffled(7)  # what keeps xdist's collections in agreement
    assert _shuffled(7) != _shuffled(8) and _shuffled(7) != ITEMS
    assert sorted(_shuffled(7)) == sorted(ITEMS)


def test_the_seed_comes_from_the_environment_and_is_named_in_the_header(
    monkeypatch: pytest.MonkeyPatch, pytestconfig: pytest.Config
) -> None:
    monkeypatch.delenv(shuffled_order.SEED_VARIABLE, raising=False)
    assert shuffled_order.seed() is None
    assert shuffled_order.pytest_report_header(pytestconfig) is None
    monkeypatch.setenv(shuffled_order.SEED_VARIABLE, " 42 ")
    assert shuffled_order.seed() == 42
    assert "MODEL_ROUTER_TEST_SHUFFLE_SEED=42" in str(
        shuffled_order.pytest_report_header(pytestconfig)
    )
