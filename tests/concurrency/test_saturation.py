"""The saturation point: the report's definition, checked against a direct one on made-up curves."""

from __future__ import annotations

import numpy as np
import pytest

from imsearch_align.concurrency import SATURATION_GAIN, saturation
from imsearch_align.report_html import production


def _direct(curve: list[tuple[int, float]]) -> int | None:
    """The smallest level c such that no later level has queries/s >= (1 + 5%) x qps(c)."""
    pts = sorted(curve)
    candidates = []
    for c, q in pts[:-1]:
        later = [q2 for c2, q2 in pts if c2 > c]
        if max(later) < q * 1.05:
            candidates.append(c)
    return min(candidates) if candidates else None


def test_it_is_the_reports_own_definition():
    assert saturation is production.saturation
    assert SATURATION_GAIN == 0.05


@pytest.mark.parametrize(
    ("qps", "want"),
    [
        ([100, 200, 400, 800, 1600], None),  # still grows at 16
        ([100, 190, 200, 203, 204], 4),  # 200 -> 204 is +2%
        ([100, 190, 199, 300, 301], 8),  # a late jump moves it
        ([100, 100, 100, 100, 100], 1),  # flat from the start
        ([100, 120, 90, 80, 70], 2),  # falls after 2
        ([100, 104.9, 109.0, 110, 111], 4),  # each step under 5%, but 111 >= 1.05 x 104.9
    ],
)
def test_made_up_curves(qps, want):
    curve = list(zip((1, 2, 4, 8, 16), qps))
    assert saturation(curve) == want
    assert _direct(curve) == want


def test_the_input_order_does_not_matter():
    assert saturation([(16, 5.0), (1, 1.0), (4, 5.0)]) == 4


def test_random_curves_against_the_direct_definition():
    rng = np.random.default_rng(0)
    for _ in range(500):
        n = int(rng.integers(2, 7))
        levels = sorted(rng.choice(np.arange(1, 65), n, replace=False).tolist())
        qps = np.cumsum(rng.normal(10, 15, n)).clip(0.1) * 10
        curve = list(zip(levels, qps.tolist()))
        assert saturation(curve) == _direct(curve)
