"""Readiness's hand-off rule without a server: a flushed segment counts as served only once
the query node lists it with its index (Milvus 2.3.5 loads a flushed segment before its index
is built, serves it from an interim index, then swaps the indexed copy in under the same id)."""

from __future__ import annotations

from types import SimpleNamespace

from imsearch_align.adapters.milvus.ready import UNINDEXED_ROWS, _handed_off


def _listing(persistent, loaded):
    def call(op, name, method, *args, **kw):
        return {"list_persistent_segments": persistent, "list_loaded_segments": loaded}[method]

    return call


def _seg(i, state="Flushed", index_name=None, rows=5000):
    s = SimpleNamespace(segment_id=i, state=state, num_rows=rows)
    if index_name is not None:
        s.index_name = index_name
    return s


def test_a_segment_loaded_before_its_index_is_not_served_yet():
    flushed = [_seg(1), _seg(2), _seg(3, state="Growing")]
    early = [_seg(1, "Sealed", "vector"), _seg(2, "Sealed", "")]  # 2: interim index
    done, seen = _handed_off(_listing(flushed, early), "c")
    assert not done and seen == "1 of 2 flushed segments not yet served with their index"
    late = [_seg(1, "Sealed", "vector"), _seg(2, "Sealed", "vector")]
    assert _handed_off(_listing(flushed, late), "c") == (
        True,
        "0 of 2 flushed segments not yet served with their index",
    )


def test_a_listing_without_index_names_counts_every_loaded_segment():
    flushed = [_seg(1), _seg(2)]
    assert not _handed_off(_listing(flushed, [_seg(1, "Sealed")]), "c")[0]
    assert _handed_off(_listing(flushed, [_seg(1, "Sealed"), _seg(2, "Sealed")]), "c")[0]


def test_a_segment_too_small_for_an_index_is_served_as_it_is():
    flushed = [_seg(1), _seg(2, rows=UNINDEXED_ROWS - 1)]
    loaded = [_seg(1, "Sealed", "vector"), _seg(2, "Sealed", "", rows=UNINDEXED_ROWS - 1)]
    assert _handed_off(_listing(flushed, loaded), "c")[0]
    big = [_seg(1, "Sealed", "vector"), _seg(2, "Sealed", "", rows=UNINDEXED_ROWS)]
    assert not _handed_off(_listing(flushed, big), "c")[0]
