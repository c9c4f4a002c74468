"""One attribute table per collection: every filter kind reads it, dispatched on the field."""

from __future__ import annotations

import numpy as np
import pytest

from imsearch_align.collection.filters import (
    AttributeTable,
    assign_categories,
    selectivity_filter,
)
from imsearch_align.framework.interfaces import Filter


def test_the_table_dispatches_on_the_field_and_names_a_missing_one():
    ids = np.arange(100, dtype=np.int64) + 7
    cat = assign_categories(ids, ids[:5], n_categories=10, seed=0)
    table = AttributeTable(cat)
    f = selectivity_filter(0.3, 10)
    np.testing.assert_array_equal(table.keeps(ids, f), cat.keeps(ids, f))
    np.testing.assert_array_equal(table.kept_ids(f), cat.kept_ids(f))
    assert table.kept_share(f) == cat.kept_share(f) == pytest.approx(0.3)
    assert set(table.attributes(ids[:3])) == {"category"}
    with pytest.raises(
        ValueError, match=r"a filter on 'price': the collection's items carry category"
    ):
        table.keeps(ids, Filter("price", (1,)))
    with pytest.raises(ValueError, match=r"field 'category' is given twice"):
        AttributeTable(cat, cat)
