"""Integer shares of a whole: the largest remainder method, with caps, and the weights that
stand in for unknown estimates. The reconciler's bucket allocation (domain/reconciliation.py)
shares a statement's unexplained tokens this way, so that the shares add up exactly."""

from __future__ import annotations

from collections.abc import Sequence


def allocate(total: int, weights: Sequence[int]) -> list[int]:
    """Largest remainder: integer shares proportional to `weights` that sum to `total`.
    Equal remainders go to the earlier position; all-zero weights share equally."""
    if total < 0 or any(w < 0 for w in weights):
        raise ValueError("totals and weights are non-negative")
    if not weights:
        return []
    if sum(weights) == 0:
        weights = [1] * len(weights)
    whole = sum(weights)
    quotas = [total * w for w in weights]
    shares = [q // whole for q in quotas]
    left = total - sum(shares)
    order = sorted(range(len(weights)), key=lambda i: (-(quotas[i] % whole), i))
    for i in order[:left]:
        shares[i] += 1
    return shares


def allocate_capped(total: int, weights: Sequence[int], caps: Sequence[int | None]) -> list[int]:
    """`allocate`, with no share past its cap (None: none): a capped share's excess goes to
    the others by their weights, and what no share can take is left out (the sum may fall
    short of `total`)."""
    shares = [0] * len(weights)
    free = list(range(len(weights)))
    left = total
    while left > 0 and free:
        part = allocate(left, [weights[i] for i in free])
        over = [
            i
            for i, share in zip(free, part, strict=True)
            if (cap := caps[i]) is not None and share > cap
        ]
        if not over:
            for i, share in zip(free, part, strict=True):
                shares[i] = share
            return shares
        for i in over:
            shares[i] = caps[i] or 0
            left -= shares[i]
        free = [i for i in free if i not in over]
    return shares


def estimate_weights(estimates: Sequence[int | None]) -> list[int]:
    known = [e for e in estimates if e is not None]
    fill = max(1, round(sum(known) / len(known))) if known else 1
    return [e if e is not None else fill for e in estimates]
