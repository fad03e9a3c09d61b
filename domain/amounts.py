"""Amounts as text: fixed-point, never scientific. A Decimal's own text turns exponential for
small values (`str(Decimal("0.00000080"))` is `8.0E-7`, a zero cost stored as NUMERIC(18, 8) is
`0E-8`), which consumers of a cost (usage accounting, dashboards, a JSON schema's `decimal`
pattern) read as garbage or refuse. Every surface that writes an amount as a string writes it
here: the ModelInvoked payload, the REST receipt, prices, the console."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated

from pydantic import PlainSerializer


def decimal_text(value: Decimal) -> str:
    """The amount's digits in fixed point, its scale kept: `0E-8` is `0.00000000`."""
    return format(value, "f")


# A Decimal field that JSON carries as `decimal_text` (a string keeps an amount exact).
PlainDecimal = Annotated[Decimal, PlainSerializer(decimal_text, return_type=str, when_used="json")]
