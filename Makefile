# The two set-up commands: `make demo` (bundled sample through every stage) and `make test`.
# Each installs what it needs into a local virtualenv (.venv) from the package registries.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

.PHONY: install demo test test-all lint bench
install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/gradus demo --out runs/demo

test: $(STAMP)
	$(PY) -m pytest -q

test-all: $(STAMP)
	$(PY) -m pytest -q -m ""

lint: $(STAMP)
	$(VENV)/bin/ruff check curate flows tests benchmarks

bench: $(STAMP)
	$(PY) benchmarks/curate.py
