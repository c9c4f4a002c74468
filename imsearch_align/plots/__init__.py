"""Figures from result dicts (or result files): PNG, matplotlib's Agg renderer.

* :func:`learning_curve`: a metric against the number of support pairs N
  (log x), one line per method (and per store / dataset / encoder pair when
  the results hold several), the 95% bootstrap interval as a band, and the
  jointly trained baseline (method ``identity``, e.g. CLIP) as a dashed line.
* :func:`recall_vs_qps`: quality (recall, or ANN fidelity against exact
  search) against queries per second (log x) for stores and index
  parameters, each point labelled.

Figures are built on :class:`matplotlib.figure.Figure` directly, never
through pyplot, so nothing changes matplotlib's global backend or state.

Rooms: ``_results`` picks the usable results and reads their values and
labels, ``_figure`` makes, styles and saves a figure, ``learning`` draws the
learning curve and ``throughput`` the quality-against-speed figure.
"""

from __future__ import annotations

from imsearch_align.plots._results import BASELINE_METHODS, metric_label
from imsearch_align.plots.learning import learning_curve
from imsearch_align.plots.throughput import recall_vs_qps

__all__ = ["BASELINE_METHODS", "learning_curve", "metric_label", "recall_vs_qps"]
