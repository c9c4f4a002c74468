# Two commands: `make demo` (the offline Flickr30k-layout study) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: venv test lint demo perf clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# torch first: the pinned CPU wheel; any other spec pulls a multi-GB CUDA build.
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e ".[all,dev]"
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q tests

lint: $(STAMP)
	$(PY) -m ruff check imsearch_align tests benchmarks

perf: $(STAMP)
	$(PY) benchmarks/perf.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
