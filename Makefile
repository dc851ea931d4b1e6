# The README's two commands: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet

# What is installed, from which lock. `make run` installs the runtime set only; `make test` and
# `make lint` add the development set on top. A marker is touched once its set is in, so a second
# run installs nothing, and a changed lock is installed again.
RUNTIME := $(VENV)/.installed-runtime
DEV := $(VENV)/.installed-dev

# `make lock`: pip-tools, pinned, in a virtualenv of its own (it resolves with the pip settings of
# this machine, as `make venv` installs). LOCK_FLAGS=--upgrade moves every unpinned transitive
# package to its newest version; without it the lock keeps them where they are.
PIP_TOOLS := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/wharf/pip-tools-7.6.2
LOCK_FLAGS ?=
PIP_COMPILE := CUSTOM_COMPILE_COMMAND="make lock  (after editing the .in file; LOCK_FLAGS=--upgrade moves every pin)" $(PIP_TOOLS)/bin/pip-compile --quiet \
	--generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links \
	$(LOCK_FLAGS)

.PHONY: run test lint lock engines image wharf-image images venv venv-dev console clean

# The project itself is installed editable without dependencies (the locks pin those) and
# without build isolation (the locked setuptools builds it), for the `wharf` console script.
$(RUNTIME): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) --require-hashes -r requirements.txt
	$(PIP) --no-deps --no-build-isolation -e .
	touch $@

$(DEV): $(RUNTIME) requirements-dev.txt
	$(PIP) --require-hashes -r requirements-dev.txt
	touch $@

# The console's browser code from npm (Monaco, the JSON editor; frontend/package-lock.json).
# Without npm the console still works, with a plain text area for JSON, and says so.
CONSOLE := frontend/node_modules/.installed
$(CONSOLE): frontend/package.json frontend/package-lock.json frontend/install_vendor.mjs
	@if command -v npm >/dev/null; then \
		cd frontend && npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed; \
	else echo "npm not found: the console's JSON editor is a plain text area (install npm, then make console)"; fi

## The console's JSON editor (Monaco) from npm.
console: $(CONSOLE)

## The runtime environment (what `make run` needs).
venv: $(RUNTIME)

## The development environment: the runtime one plus the test and lint tools.
venv-dev: $(DEV)

## Bring the whole system up on embedded defaults and deploy the demo model
## (`make run UP_FLAGS=--no-demo`: everything but the demo).
UP_FLAGS ?=
run: venv console
	$(PY) manage.py up $(UP_FLAGS)

## The whole test suite (unit, API, gateway, end to end on Docker and local processes).
test: venv-dev lint console
	$(PY) -m pytest

lint: venv-dev
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports --no-cache
	$(PY) manage.py makemigrations --check --dry-run
	for overlay in deploy/kubernetes/overlays/*/; do kubectl kustomize "$$overlay" >/dev/null || exit 1; done

## Regenerate requirements.txt and requirements-dev.txt from their .in files.
lock: $(PIP_TOOLS)/bin/pip-compile
	$(PIP_COMPILE) --output-file requirements.txt requirements.in
	$(PIP_COMPILE) --output-file requirements-dev.txt requirements-dev.in

$(PIP_TOOLS)/bin/pip-compile:
	$(PYTHON) -m venv $(PIP_TOOLS)
	$(PIP_TOOLS)/bin/python -m pip install --quiet pip-tools==7.6.2

## Engines for the tests: the vLLM CPU image (needs dockerd) and the local virtualenv.
engines: image
	bash engine_images/vllm-cpu/install_venv.sh $${WHARF_VLLM_VENV:-$$HOME/.cache/wharf/vllm-cpu-venv}

image:
	bash engine_images/vllm-cpu/build.sh

## The image of Wharf itself (API, gateway, worker): wharf/wharf:<version>; root and dockerd.
## After the console's npm install, so that it holds the JSON editor and a later build of the
## same checkout (tests/test_wharf_image.py) finds it up to date.
wharf-image: console
	bash images/wharf/build.sh

## Every image: the vLLM CPU engine's and Wharf's.
images: image wharf-image

clean:
	rm -rf .wharf .pytest_cache .mypy_cache .ruff_cache
