# specvet: `make demo` (install + demo data + serve) and `make test` (the whole suite).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install install-dev demo serve test lint format bench migrate clean

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
	$(PY) manage.py runserver $(HOST):$(PORT)

serve: migrate
	$(PY) manage.py runserver $(HOST):$(PORT)

test: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest

lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install-dev
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: install
	$(PY) -m agent.bench render

clean:
	rm -rf $(VENV) staticfiles var/specvi-mini .pytest_cache
