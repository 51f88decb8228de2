# Every target creates .venv when it is missing and installs with the pins in constraints.txt.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test test-all demo demo-quick bench bench-gpu gpu-check docs clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not exhaustive" --durations=15

test-all: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile

demo: $(STAMP)
	$(PY) -m rightreasons demo

# the 1-seed smoke run of every stage (<= 2 minutes on 2 CPU cores): runs/demo-quick/report.md
demo-quick: $(STAMP)
	$(PY) -m rightreasons demo --quick --out runs/demo-quick

bench: $(STAMP)
	$(PY) scripts/bench.py

bench-gpu: $(STAMP)
	$(PY) scripts/bench.py --device cuda --only gpu-throughput

gpu-check: $(STAMP)
	$(PY) scripts/gpu_check.py --out gpu-check

docs: $(STAMP)
	$(PY) -m rightreasons.apps.config_reference docs/config.md
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
