# One command each: `make demo` (install + scripts/reproduce.py on the small preset) and `make test`.
# Everything goes into a virtual environment in .venv; torch is pinned to the 2.13.0 wheel
# (the CPU build on machines without a GPU; pip picks the CUDA build on a GPU box).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
OUT ?= runs/reproduce-small

.PHONY: install demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[dev]"
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

clean:
	rm -rf $(VENV) runs .pytest_cache
