# The two commands (README): `make run` and `make test`. Both bootstrap .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.requirements-installed

.PHONY: run test test-faults lint bench docs

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	cp requirements.txt $(STAMP)

run: $(STAMP)
	$(PY) -m sidewisp.ops.devservices run

# make test: the suite over two pytest-xdist workers (each with its own test database and Redis prefix;
# tests/conftest.py `xdist_scope` says what stays together): about 15 minutes on two cores instead of about 35 in one
# process (TEST_WORKERS=0).
TEST_WORKERS ?= 2
test: $(STAMP)
	$(PY) -m sidewisp.ops.devservices test -n $(TEST_WORKERS) $(PYTEST_ARGS)

# make test-faults: every kill point of tests/faults/test_kill_at_boundary.py, each repeated
# SIDEWISP_FAULT_REPEAT times (default 2) while SIDEWISP_FAULT_LOAD busy processes (default 1) keep the CPU
# loaded, so a race that shows in one run of ten of a case has more chances to show. A case takes 15-30 s
# (a worker's start and a 3 s lease): 14 kill points, 29 cases at the default repeat. CI (.ci/run) runs it
# after `make test` with SIDEWISP_FAULT_REPEAT=1 (15 cases, about 5-10 min).
SIDEWISP_FAULT_REPEAT ?= 2
SIDEWISP_FAULT_LOAD ?= 1
test-faults: $(STAMP)
	SIDEWISP_FAULT_REPEAT=$(SIDEWISP_FAULT_REPEAT) SIDEWISP_FAULT_LOAD=$(SIDEWISP_FAULT_LOAD) \
		$(PY) -m sidewisp.ops.devservices test tests/faults/test_kill_at_boundary.py $(PYTEST_ARGS)

# make docs: the documentation site (docs/, mkdocs.yml) at http://127.0.0.1:8001/, rebuilt on every save.
# `make test` builds it with --strict (tests/sidewisp/test_docs.py).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --strict --dev-addr 127.0.0.1:8001

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .


# --- make bench (docs/benchmarks.md): every benchmark, one table. PostgreSQL and Redis required
# (DATABASE_URL defaults to the local postgres database, REDIS_URL to the local Redis). The tracing
# peers it compares with are in bench/requirements.txt, installed into .venv-bench beside the app's
# exact pins (one resolver run, so no pin can move; pip check confirms), never into .venv.
# BENCH_ARGS=--quick gives rough figures in minutes; --tiny runs every section at a size that only proves it
# runs (tests/bench runs it in `make test`). Nothing needs migrating: sections use throwaway databases.
BENCH_VENV := .venv-bench
BENCH_PY := $(BENCH_VENV)/bin/python
BENCH_STAMP := $(BENCH_VENV)/.requirements-installed

$(BENCH_STAMP): requirements.txt bench/requirements.txt
	test -x $(BENCH_PY) || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_PY) -m pip install --quiet --upgrade pip
	$(BENCH_PY) -m pip install --quiet -r requirements.txt -r bench/requirements.txt
	$(BENCH_PY) -m pip check
	cat requirements.txt bench/requirements.txt > $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	DATABASE_URL="$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}" \
		$(BENCH_PY) -m bench.run --require-postgres $(BENCH_ARGS)
