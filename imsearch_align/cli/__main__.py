"""``python -m imsearch_align.cli``: the ``imsearch-align`` command."""

from __future__ import annotations

import sys

from imsearch_align.cli.app import main

sys.exit(main())
