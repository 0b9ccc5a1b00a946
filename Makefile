# specvet: `make demo` (install + demo data + serve) and `make test` (the whole suite).
#
# Which command installs what (`make help` prints this):
#   make install      requirements.txt into .venv: what the app needs to run (`make demo` runs it)
#   make install-dev  requirements-dev.txt on top: pytest, the Playwright *Python package*,
#                     Sphinx, ruff, mypy (`make test`, `make docs`, `make screenshots` run it)
#   make chromium     Debian's chromium (apt-get, as root), the browser Playwright drives; we do
#                     not use `playwright install` (its download fails here)
# So a demo venv has no Playwright: for the browser-driven steps (screenshots, tests/e2e) run
# `make install-dev chromium` first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
HOST ?= 127.0.0.1
PORT ?= 8000
CHROMIUM ?= /usr/bin/chromium

.PHONY: help install install-dev chromium demo serve test contract lint format bench real-data real-bench onedstds onedstds-bench outside-data outside-bench migrate clean docs docs-only screenshots

help:
	@sed -n '3,10p' Makefile | sed 's/^# \{0,1\}//'

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: requirements.txt | $(VENV)/bin/python
	$(PIP) install -r requirements.txt
	touch $@

$(VENV)/.installed-dev: requirements.txt requirements-dev.txt | $(VENV)/bin/python
	$(PIP) install -r requirements-dev.txt
	touch $(VENV)/.installed $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

migrate: install
	$(PY) manage.py migrate --no-input

demo: migrate
	$(PY) manage.py demo_setup
	@echo ""
	@echo "specvet is at http://$(HOST):$(PORT)/  (log in as cannon / specvet-demo)"
	$(PY) manage.py serve_demo $(HOST):$(PORT)

# The dev server and a Celery worker beside it (jobs run in the background on the filesystem
# broker, no Redis); Ctrl-C stops both. `manage.py runserver` alone runs jobs in-process.
serve: migrate
	$(PY) manage.py serve_demo $(HOST):$(PORT)

# The browser tests (tests/e2e) drive Debian's Chromium; Playwright's own browser download fails
# here. Installed once (apt-get, as root); if it cannot be, the browser tests fail saying so.
chromium:
ifneq ($(SPECVET_SKIP_E2E),1)
	@test -x $(CHROMIUM) || DEBIAN_FRONTEND=noninteractive apt-get install -y chromium \
		|| { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; } \
		|| echo "warning: could not install Debian's chromium; the browser tests will fail"
endif

test: install-dev chromium
	$(PY) -m agent.real_corpus fetch || echo "warning: the real-spectra cache could not be built; its tests will skip"
	$(PY) -m agent.outside_set fetch || echo "warning: the outside set could not be fetched; its tests will skip"
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest
	$(MAKE) docs-only

# The API contract at the nightly size (the suite runs it with 4 requests per operation and
# user): Schemathesis' checks (no 500, documented statuses and bodies, requests the schema allows
# accepted and others refused) with CONTRACT_EXAMPLES requests each, and the fuzz test (NUL
# characters included) alike; about 10 minutes on 2 cores.
CONTRACT_EXAMPLES ?= 25
contract: install-dev
	SPECVET_CONTRACT_EXAMPLES=$(CONTRACT_EXAMPLES) SPECVET_FUZZ_EXAMPLES=$(CONTRACT_EXAMPLES) \
		$(VENV)/bin/pytest -q -p no:cacheprovider tests/web/core/test_api_contract.py tests/web/core/test_api_fuzz.py

# The docs (docs/_build/html/index.html): offline, warnings as errors, every internal link and
# cross-reference checked (nitpicky); the reference pages are generated from the code. The
# screenshots come from a browser test first; without Chromium each missing screenshot is a note
# in the page saying how to make it (make install-dev chromium screenshots, then make docs-only).
docs: install-dev chromium screenshots docs-only

docs-only: install-dev
	$(VENV)/bin/sphinx-build -W --keep-going -n -b html docs docs/_build/html

# The browser test that visits the main pages as the demo users and saves their screenshots
# into docs/_static/screenshots/ (not committed: every picture is of today's pages).
screenshots: install-dev
ifneq ($(SPECVET_SKIP_E2E),1)
	@if test -x $(CHROMIUM); then $(VENV)/bin/pytest -q -p no:cacheprovider tests/e2e/test_screenshots_e2e.py; \
	else echo "warning: no $(CHROMIUM): no screenshots; the docs say where each belongs. Install it with 'make chromium' (as root)"; fi
endif

lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: install-dev
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: install
	$(PY) -m agent.bench render

# Real spectra for the benchmark and tests: pinned wheels (exosims, ppxf) downloaded by pip into
# $(SPECVET_DATA_CACHE) (default ~/.cache/specvet); nothing is copied into the repository.
real-data: install
	$(PY) -m agent.real_corpus fetch

# The inspector on real data (development / validation) beside SpecVI-mini (synthetic).
real-bench: real-data
	$(PY) -m agent.bench.real

# Real spectra the corpus does not use: IRAF's onedstds standard-star tables (AB magnitudes),
# shipped by Debian's iraf-noao (apt-get, as root) under /usr/lib/iraf/noao/lib/onedstds.
onedstds:
	@test -d /usr/lib/iraf/noao/lib/onedstds || DEBIAN_FRONTEND=noninteractive apt-get install -y iraf-noao \
		|| { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y iraf-noao; }

# The inspector's confidence on them (no types ship with the tables: confidence, not accuracy).
onedstds-bench: install onedstds real-data
	$(PY) -m agent.bench.onedstds

# Typed real spectra the corpus does not use (standard stars of published type, from the pypeit
# 1.9.0 source archive; agent/data/outside_set.json), extracted into the same cache.
outside-data: install
	$(PY) -m agent.outside_set fetch

# The inspector on them: balanced accuracy, ECE and wrong answers at >= 0.9 per task.
outside-bench: outside-data real-data
	$(PY) -m agent.bench.outside

clean:
	rm -rf $(VENV) staticfiles var/specvi-mini .pytest_cache docs/_build docs/reference/generated
