# One command each: `make demo` (install + scripts/reproduce.py on the small preset) and `make test`.
# Everything goes into a virtual environment in .venv, at the exact versions of constraints.txt
# (the lock: what the test suite last passed with; `make lock` refreshes it). torch is pinned to
# 2.13.0 (the CPU wheel on machines without a GPU; pip picks the CUDA build on a GPU box).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LOCK := constraints.txt
OUT ?= runs/reproduce-small

.PHONY: install demo test lint bench lock clean

$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade -c $(LOCK) pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet -c $(LOCK) torch==2.13.0
	$(PY) -m pip install --quiet -c $(LOCK) -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: install
	HF_HUB_OFFLINE=1 $(PY) scripts/reproduce.py --preset small --out $(OUT)

test: install
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

lint: install
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

bench: install
	$(PY) benchmarks/bench_generation.py --preset paper
	$(PY) benchmarks/bench_bayes.py
	$(PY) benchmarks/bayes_tables.py
	$(PY) benchmarks/bench_model.py
	$(PY) benchmarks/bench_trainer.py
	$(PY) benchmarks/small_training.py
	$(PY) benchmarks/probe_small.py
	$(PY) benchmarks/in_context_predictors.py

# Refresh the lock: the newest releases within pyproject.toml's bounds in a fresh environment,
# kept only if the whole test suite passes with them.
LOCK_VENV := .venv-lock
lock:
	rm -rf $(LOCK_VENV)
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LOCK_VENV)/bin/python -m pip install --quiet torch==2.13.0
	$(LOCK_VENV)/bin/python -m pip install --quiet -e ".[dev]"
	HF_HUB_OFFLINE=1 $(LOCK_VENV)/bin/python -m pytest -q
	{ echo "# The lock: exact versions the test suite passed with (make lock, $$(date +%Y-%m-%d)); make install and CI use it."; \
	  echo "# pyproject.toml keeps the loose bounds for installs into other environments. torch's local tag (+cpu) is dropped."; \
	  $(LOCK_VENV)/bin/python -m pip freeze --all --exclude-editable | grep -v '^hmm-roformer' | sed -E 's/^(torch==[^+]+)\+.*/\1/'; \
	} > $(LOCK)
	rm -rf $(LOCK_VENV)

clean:
	rm -rf $(VENV) $(LOCK_VENV) runs .pytest_cache
