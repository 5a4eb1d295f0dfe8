# The two commands (README): `make run` and `make test`. Both bootstrap .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.requirements-installed

.PHONY: run test lint

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	cp requirements.txt $(STAMP)

run: $(STAMP)
	$(PY) -m sidewisp.devservices run

test: $(STAMP)
	$(PY) -m sidewisp.devservices test $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

