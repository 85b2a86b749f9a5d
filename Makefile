# django-workerflow developer commands.
#
#   make demo    run the example shop demo (creates .venv on first use) from a fresh database;
#                DEMO_PORT=8080 serves on another port (default 8000; when busy, a free one,
#                printed), DEMO_KEEP_DB=1 keeps the last run's database
#   make test    everything a developer runs: make lint, make check, make test-suite
#   make lint    ruff lint + format check, mypy, lint-imports (the layers contract)
#   make check   Django's system checks and the migrations check
#   make test-suite  pytest with coverage (fails under pyproject's fail_under)
#   make test-fast  pytest on SQLite, one process a CPU (pytest-xdist), without the slow
#                   tests (real worker processes) or the browser ones
#   make test-faults  the database faults: a PostgreSQL server of its own, killed, restarted
#                     and stopped under two clusters (minutes; needs initdb and pg_ctl)
#
# Override on the command line, e.g.
#   make test PYTHON=python3.13 VENV=.venv-py313 DJANGO='django>=6,<7' PYTEST_ARGS='-x -k foo'

PYTHON ?= python3
VENV ?= .venv
DJANGO ?= django>=5.2,<6
PYTEST_ARGS ?=

BIN := $(VENV)/bin

.DEFAULT_GOAL := help
.PHONY: help install test test-suite test-fast test-faults lint check format demo bench clean

help:
	@echo "Targets: install test lint check test-suite format demo bench clean"
	@echo "         test-fast (pytest on SQLite, without slow and browser tests)"
	@echo "         test-faults (the database faults, on a PostgreSQL server of their own)"
	@echo "Demo:    make demo [DEMO_PORT=8000] [DEMO_KEEP_DB=1]  (port 8000 by default, a free"
	@echo "         one, printed, when it is busy; a fresh database each run unless DEMO_KEEP_DB=1)"
	@echo "Variables: PYTHON=$(PYTHON) VENV=$(VENV) DJANGO='$(DJANGO)' PYTEST_ARGS='$(PYTEST_ARGS)'"

# Stamp file: (re)install whenever pyproject.toml changes.
$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]' '$(DJANGO)'
	touch $@

install: $(VENV)/.installed

test: lint check test-suite

# The whole suite, with coverage: the figure is printed, and below [tool.coverage.report]
# fail_under it fails. `coverage run` starts measuring before pytest imports its plugins:
# ours (the pytest11 entry point) imports the package, whose module-level lines
# `pytest --cov` would count as never run.
test-suite: install
	$(BIN)/coverage run -m pytest $(PYTEST_ARGS)
	$(BIN)/coverage report

# Django's system checks and the migrations check: both depend on the Django version, so
# .ci/run runs them on every combination (they take seconds).
check: install
	$(BIN)/python manage.py check --fail-level WARNING
	$(BIN)/python manage.py makemigrations --check --dry-run

# The inner loop: SQLite, no test that starts real processes or takes seconds (`slow`), no browser.
test-fast: install
	@WORKERFLOW_DB=sqlite $(BIN)/pytest -q -rfE -n auto -m 'not slow and not browser' $(PYTEST_ARGS)

# The database faults (tests/reliability/database_faults): about three minutes a seed, so
# not in test-suite. They start a PostgreSQL server of their own (initdb into a temporary
# directory, a free port), never touching the one the other tests use, and print figures.
test-faults: install
	WORKERFLOW_DATABASE_FAULTS=1 $(BIN)/pytest -q -s -rfE tests/reliability/database_faults $(PYTEST_ARGS)

# Static checks: they do not depend on the database or the Django version, so .ci/run runs
# them once.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

demo: install
	$(BIN)/python -m testproject.demo

# The benchmark has its own venv: DBOS (the peer) and the profiler stay out of the test venv.
BENCH_VENV ?= .venv-bench
BENCH_ARGS ?=

$(BENCH_VENV)/.installed: pyproject.toml
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install --quiet -e '.[test,bench]' '$(DJANGO)'
	touch $@

bench: $(BENCH_VENV)/.installed
	$(BENCH_VENV)/bin/python -m bench $(BENCH_ARGS)

clean:
	rm -rf .venv .venv-* db.sqlite3 db.sqlite3-* artifacts/ build/ dist/ *.egg-info
	find . -path ./.git -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
	rm -rf .pytest_cache .ruff_cache .coverage .coverage.*
