# Two commands: `make demo` (the offline Flickr30k-layout study) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: venv test lint demo perf clean

# The offline demo: 500 rendered shape images written in the Flickr30k layout,
# EfficientNet-Lite0 + MiniLM (both shipped in PyPI wheels), 4 methods x 2 N,
# FAISS and Milvus Lite. Output (table, JSONs, leaderboard, PNG) in demo_out/.
DEMO_ARGS ?= --shapes 500 --quick --stores faiss milvus-lite --out demo_out

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first: the pinned CPU wheel; any other spec pulls a multi-GB CUDA build.
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e ".[all,dev]"
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q --durations=25 tests

lint: $(STAMP)
	$(PY) -m ruff check imsearch_align tests benchmarks

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) benchmarks/flickr.py $(DEMO_ARGS)

perf: $(STAMP)
	$(PY) benchmarks/perf.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
