"""The conformance kit cannot be fooled: broken stores are caught, with the fault named.

Oracles: a reference store written from the definitions (``RefStore`` in
``broken_stores.py``, independent of ExactStore) must pass the whole kit;
each broken variant (sign flipped, ids off by one, unsorted rows, results
in the wrong row, not thread-safe while declaring thread_safe) must fail it
with a message naming the fault, whether the test class says the store is
exact or approximate. The kit runs for real, in an inner pytest session.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import uuid
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from imsearch_align.framework.interfaces import SearchResult
from imsearch_align.testing.store_conformance import (
    assert_exact_topk,
    assert_rows_ordered,
    check_search,
    clustered_vectors,
    sparse_clustered,
)

HERE = Path(__file__).resolve().parent

#: store -> a phrase its failure message must contain (None: must pass)
BROKEN = {
    "RefStore": None,
    "HonestRacy": None,
    "SignFlipped": "sign flipped?",
    "OffByOne": "ids off by",
    "Unsorted": "scores are not sorted descending",
    "WrongRow": "results in the wrong row",
    "Racy": "not thread-safe?",
}

_CLASS = """
class Test{store}{mode}(StoreConformance):
    exact = {exact}
    supports_sparse = True
    ann_min_recall = 0.9

    @pytest.fixture
    def make_store(self):
        return lambda: {mod}.{store}()
"""


class _Collect:
    """A pytest plug-in that keeps every test report of the inner session."""

    def __init__(self) -> None:
        self.reports: list[pytest.TestReport] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.reports.append(report)


@pytest.fixture(scope="module")
def kit_outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """Run the kit against every store, exact and approximate: class -> {test: outcome/message}."""
    root = tmp_path_factory.mktemp("kit")
    mod = f"broken_stores_{uuid.uuid4().hex[:8]}"
    shutil.copy(HERE / "broken_stores.py", root / f"{mod}.py")
    body = [
        "import pytest",
        f"import {mod}",
        "from imsearch_align.testing.store_conformance import StoreConformance",
    ]
    for store in BROKEN:
        for mode, exact in (("Exact", True), ("Approx", False)):
            body.append(_CLASS.format(store=store, mode=mode, exact=exact, mod=mod))
    test_file = root / f"test_kit_{mod}.py"
    test_file.write_text("\n".join(body))
    collect = _Collect()
    code = pytest.main(
        [str(test_file), "-q", "-p", "no:cacheprovider", "--rootdir", str(root)],
        plugins=[collect],
    )
    assert code in (0, 1), f"the inner pytest session failed to run (exit code {code})"
    out: dict[str, dict[str, str]] = {}
    for rep in collect.reports:
        if rep.when == "call" or rep.outcome != "passed":
            cls, test = rep.nodeid.split("::")[1:3]
            if rep.failed:
                out.setdefault(cls, {})[test] = f"FAILED {rep.longreprtext}"
            else:
                out.setdefault(cls, {}).setdefault(test, rep.outcome)
    return out


@pytest.mark.parametrize("mode", ["Exact", "Approx"])
@pytest.mark.parametrize("store", list(BROKEN))
def test_the_kit_catches_each_fault_and_names_it(kit_outcomes, store, mode):
    outcomes = kit_outcomes[f"Test{store}{mode}"]
    failed = {t: o for t, o in outcomes.items() if o.startswith("FAILED")}
    phrase = BROKEN[store]
    if phrase is None:
        assert not failed, f"a correct store fails the kit: {failed}"
        assert len(outcomes) >= 25
        return
    assert failed, f"{store} ({mode}) passed the whole kit"
    named = [t for t, o in failed.items() if phrase in o]
    assert named, f"no failure of {store} ({mode}) says {phrase!r}: {failed}"
    if store == "Racy":  # only the concurrency test can see it
        assert set(failed) == {"test_concurrent_search"}
    else:  # the store's serial answers are wrong: the truth checks see it in many tests
        assert {"test_scores_are_true_dense", "test_scores_are_true_sparse"} <= set(failed)


def test_an_honest_thread_unsafe_store_skips_only_the_concurrency_test(kit_outcomes):
    outcomes = kit_outcomes["TestHonestRacyExact"]
    assert outcomes["test_concurrent_search"] == "skipped"
    assert outcomes["test_scores_are_true_dense"] == "passed"


def test_the_sign_flip_message_names_query_id_and_both_scores(kit_outcomes):
    msg = kit_outcomes["TestSignFlippedApprox"]["test_scores_are_true_dense"]
    # "query 0: id 123 reported 5.1, true -5.1: sign flipped?"
    m = re.search(r"query (\d+): id (\d+) reported (-?[\d.e+-]+), true (-?[\d.e+-]+): sign", msg)
    assert m, msg
    assert float(m.group(3)) == pytest.approx(-float(m.group(4)), rel=1e-4)


# ----------------------------------------------------------------------------- the helpers


def _ref_store():
    """``RefStore`` from broken_stores.py (tests are not a package: load the file)."""
    spec = importlib.util.spec_from_file_location("_kit_broken_stores", HERE / "broken_stores.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.RefStore()


@pytest.fixture(scope="module")
def case():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((100, 8))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    x[50:60] = x[:10]  # ties
    ids = rng.permutation(10_000)[:100].astype(np.int64)
    q = np.concatenate([x[:5], rng.standard_normal((5, 8)).astype(np.float32)])
    with _ref_store() as store:
        store.create_collection("c", 8)
        store.insert("c", x, ids)
        return x, ids, q, store.search("c", q, 10)


def mutate(res, fn):
    ids, sc = res.ids.copy(), res.scores.copy()
    fn(ids, sc)
    return SearchResult(ids, sc)


def test_correct_result_passes(case):
    x, ids, q, res = case
    assert_rows_ordered(res, 10, 10)
    assert_exact_topk(res, q, x, ids, 10)
    rep = check_search(res, q, x, ids, 10, exact=True)
    assert rep.recall == 1.0 and rep.ok


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (lambda i, s: i.__setitem__((0, 9), i[1, 0]), "query 0: "),
        (lambda i, s: i.__setitem__((0, 1), i[0, 2]), "returned twice"),
        (lambda i, s: s.__setitem__((3, 4), s[3, 4] + 1e-3), "query 3: id .* reported"),
        (
            lambda i, s: (i.__setitem__((2, 9), -1), s.__setitem__((2, 9), -np.inf)),
            r"query 2: 9 hits, expected 10 \(min\(k, n\) = min\(10, 100\)\)",
        ),
        (lambda i, s: i.__setitem__((4, 3), 10**7), "query 4, rank 3: id 10000000 .* never"),
    ],
)
def test_exact_check_catches(case, fn, message):
    x, ids, q, res = case
    with pytest.raises(AssertionError, match=message):
        assert_exact_topk(mutate(res, fn), q, x, ids, 10)


def test_exact_check_catches_a_doc_below_the_kth_score(case):
    x, ids, q, res = case
    true = q.astype(np.float64) @ x.T.astype(np.float64)
    worst = int(np.argmin(true[0]))  # the worst doc, reported with its true score, last
    bad = mutate(
        res, lambda i, s: (i.__setitem__((0, 9), ids[worst]), s.__setitem__((0, 9), true[0, worst]))
    )
    with pytest.raises(AssertionError, match=r"recall@10 = 0\.99.* query 0 has recall 0\.900"):
        assert_exact_topk(bad, q, x, ids, 10)
    # an approximate store may miss it: only the recall floor applies
    check_search(bad, q, x, ids, 10, exact=False, min_recall=0.9)


def test_order_check_catches_tie_and_padding_errors(case):
    _, _, _, res = case
    # query 0 equals stored rows 0 and 50: two docs tied at the top, ids must ascend
    assert res.scores[0, 0] == res.scores[0, 1] and res.ids[0, 0] < res.ids[0, 1]
    swapped = mutate(res, lambda i, s: i.__setitem__((0, slice(0, 2)), i[0, 1::-1]))
    with pytest.raises(AssertionError, match=r"query 0: ranks 0 and 1 .* ascending id"):
        assert_rows_ordered(swapped, 10, 10)
    hole = mutate(res, lambda i, s: (i.__setitem__((1, 3), -1), s.__setitem__((1, 3), -np.inf)))
    with pytest.raises(AssertionError, match=r"query 1, rank 4: .* follows a no-hit"):
        assert_rows_ordered(hole, 10, 10)
    zero = mutate(res, lambda i, s: (i.__setitem__((1, 9), -1), s.__setitem__((1, 9), 0.0)))
    with pytest.raises(AssertionError, match=r"query 1, rank 9: a no-hit .* -inf, got 0\.0"):
        assert_rows_ordered(zero, 10, 10)
    up = mutate(res, lambda i, s: s.__setitem__((2, 5), s[2, 0] + 1))
    with pytest.raises(AssertionError, match=r"query 2: rank 4 .* not sorted descending"):
        assert_rows_ordered(up, 10, 10)
    wide = SearchResult(res.ids, res.scores)
    object.__setattr__(wide, "scores", res.scores.astype(np.float64))  # bypass the cast
    with pytest.raises(AssertionError, match="float32"):
        assert_rows_ordered(wide, 10, 10)
    with pytest.raises(AssertionError, match="shape"):
        assert_rows_ordered(res, 5, 10)


def test_sparse_rule_in_check_search():
    x = sp.csr_matrix(np.eye(4, dtype=np.float32))
    q = sp.csr_matrix(np.array([[1, 0, 0, 0]], dtype=np.float32))
    ids = np.arange(4) + 10
    good = SearchResult(np.array([[10, -1, -1]]), np.array([[1, -np.inf, -np.inf]]))
    check_search(good, q, x, ids, 3, exact=True)
    padded_with_zeros = SearchResult(np.array([[10, 11, 12]]), np.array([[1, 0, 0]]))
    with pytest.raises(AssertionError, match="id 11 shares no term with the query"):
        check_search(padded_with_zeros, q, x, ids, 3, exact=False)


def test_clustered_vectors():
    x, q = clustered_vectors(500, 16, n_clusters=5, n_queries=20, seed=3)
    assert x.shape == (500, 16) and q.shape == (20, 16) and x.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1, rtol=1e-5)
    x2, _ = clustered_vectors(500, 16, n_clusters=5, n_queries=20, seed=3)
    np.testing.assert_array_equal(x, x2)
    # clustered: a query's best doc is far closer than a random doc
    s = q @ x.T
    assert s.max(axis=1).mean() > 0.8 and abs(s.mean()) < 0.3


def test_sparse_clustered():
    x, q = sparse_clustered(100, 32, nnz=5, n_queries=7, seed=1)
    assert sp.isspmatrix_csr(x) and x.shape == (100, 32) and q.shape == (7, 32)
    assert (np.diff(x.indptr) == 5).all() and (x.data > 0).all()
    np.testing.assert_allclose(sp.linalg.norm(x, axis=1), 1, rtol=1e-5)
