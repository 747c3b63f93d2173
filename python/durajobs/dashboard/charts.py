"""Charts drawn on the server as inline SVG: no script, nothing loaded from elsewhere."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from markupsafe import Markup, escape

WIDTH, HEIGHT, GAP = 600, 120, 1
# the outcomes a bar stacks, bottom up, with their CSS class (dashboard.css colours them)
SERIES = ("done", "retried", "failed", "dead")


@dataclass(frozen=True, slots=True)
class Bucket:
    """One minute's settled attempts, by outcome."""

    at: datetime
    done: int = 0
    retried: int = 0
    failed: int = 0
    dead: int = 0

    def count(self, series: str) -> int:
        return int(getattr(self, series))

    @property
    def total(self) -> int:
        return sum(self.count(series) for series in SERIES)


def throughput(buckets: Sequence[Bucket]) -> Markup:
    """Stacked bars, one a minute, oldest on the left; each bar's title says its numbers."""
    if not buckets:
        return Markup('<p class="empty">No settled attempts in the window.</p>')
    most = max(max(bucket.total for bucket in buckets), 1)
    width = WIDTH / len(buckets)
    bars = []
    for index, bucket in enumerate(buckets):
        x = index * width
        y = float(HEIGHT)
        title = escape(
            f"{bucket.at:%H:%M} UTC: "
            + ", ".join(f"{bucket.count(series)} {series}" for series in SERIES)
        )
        parts = [f"<title>{title}</title>"]
        for series in SERIES:
            height = HEIGHT * bucket.count(series) / most
            if height <= 0:
                continue
            y -= height
            parts.append(
                f'<rect class="{series}" x="{x:.1f}" y="{y:.1f}" '
                f'width="{max(width - GAP, 1):.1f}" height="{height:.1f}"/>'
            )
        bars.append(f"<g>{''.join(parts)}</g>")
    label = escape(f"settled attempts a minute, at most {most}")
    return Markup(
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{label}" '
        f'preserveAspectRatio="none">{"".join(bars)}</svg>'
    )
