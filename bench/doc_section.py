"""docs/benchmarks.md holds one section per benchmark between its start and end markers; each
benchmark rewrites only its own section."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"


def write_section(text: str, start: str, end: str) -> None:
    """Replace the text between `start` and `end` (markers included) with `text`, or append it
    when the markers are not there yet."""
    DOC.parent.mkdir(parents=True, exist_ok=True)
    current = (
        DOC.read_text()
        if DOC.exists()
        else "# Benchmarks\n\nMeasured numbers, one section per benchmark; each benchmark "
        "rewrites only its own section.\n"
    )
    if start in current and end in current:
        head, rest = current.split(start, 1)
        _, tail = rest.split(end, 1)
        updated = head + text + tail
    else:
        updated = current.rstrip("\n") + "\n\n" + text + "\n"
    DOC.write_text(updated)
