"""ANN fidelity from the truth: recall@k and score checks recomputed from the stored vectors.

A store is never believed about its own results. As ann-benchmarks does,
only the *ids* a store returns are kept; every returned id's true inner
product with its query is recomputed from the vectors that were indexed
(float64 from the float32 inputs), and the exact top-k is computed here by
brute force. Then, for query ``i``:

* ``n_i`` = the documents that count as hits: every document of a dense
  collection; in a sparse collection the documents whose inner product with
  the query is non-zero (the rule of
  :mod:`imsearch_align.framework.interfaces`); ``m_i = min(k, n_i)`` hits
  are expected;
* ``t_i`` = the true ``m_i``-th best inner product;
* a returned entry in the first ``k`` columns is **found** when its id is a
  stored id, appears for the first time in the row, is a hit (non-zero
  inner product in a sparse collection) and its *true* score is at least
  ``t_i - tol``: a document tied with the k-th neighbour is as good an
  answer as the one brute force happened to keep (ann-benchmarks' rule);
* ``recall_i = min(found_i, m_i) / m_i`` (1.0 when ``m_i = 0``); ``recall@k``
  is the mean over queries.

Score truth: each reported score must equal the true inner product of the
id it comes with, ``|reported - true| <= tol``. The tolerance is relative to
the Cauchy-Schwarz bound ``||q|| * ||x||``, the natural scale of float32
rounding in a dot product: ``tol = rtol * max(||q|| ||x||, |t_i|)``, with
``rtol`` by default ``max(1e-5, 4 * eps32 * sqrt(d))`` (``d`` the dimension,
or the largest query ``nnz`` of a sparse space), so libraries that sum in
another order agree while a flipped sign, a shifted id or a distance
reported as a similarity do not.

Every problem found is counted (:class:`FidelityReport`) and the first few
are described with a likely cause, e.g. ``"query 3: id 17 reported 5.1,
true -5.1: sign flipped?"``.

Rooms: :mod:`.truth` (the indexed vectors' true inner products, the brute
force k-th best score, :class:`TrueScores`), :mod:`.report` (the checks,
recall and :class:`FidelityReport`, :func:`ann_recall`,
:func:`measure_fidelity`) and :mod:`.causes` (a bad row's likely cause).
"""

from __future__ import annotations

from imsearch_align.framework.fidelity.report import (
    FidelityReport,
    ann_recall,
    default_rtol,
    measure_fidelity,
)
from imsearch_align.framework.fidelity.truth import TrueScores

__all__ = ["FidelityReport", "TrueScores", "ann_recall", "default_rtol", "measure_fidelity"]
