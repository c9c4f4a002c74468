"""Make ``tiny_store_pkg`` importable when it is not installed (imsearch_align's own CI).

An out-of-tree package would be installed (``pip install -e .``) before its
tests run; this folder is also collected by imsearch_align's test suite,
where it is not.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("tiny_store_pkg") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
