# The two commands a newcomer needs:
#   make run    set up and run the platform on embedded defaults (SQLite, filesystem broker,
#               local S3 server): web server, Celery worker and beat, three simulated fleets
#               and a demo order (ONCE=1: play that once, verify the delivery, exit)
#   make test   set up and run the test suite (needs PostgreSQL on 127.0.0.1:5432, see README)

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/marketplace
# Parallel test workers (pytest-xdist), each with its own database, RabbitMQ vhost, ports and
# temporary folders; tests sharing one resource carry an xdist_group (tests/README.md).
# PYTEST_WORKERS=0 runs the suite in one process.
PYTEST_WORKERS ?= 2
PYTEST_PARALLEL := $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadgroup)
PYTEST_ARGS ?=
FLOWER_PORT ?= 5555

.PHONY: run test setup setup-run lint migrate clean flower

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# `make run` installs the runtime only; `make test` adds the dev tools. --no-compile: Python
# compiles the modules a process imports when it first imports them, which is a fraction of
# what pip would byte-compile up front (it halves the install).
$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --no-compile -e .
	touch $@

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --no-compile -e '.[dev]'
	touch $@ $(VENV)/.installed-run

local_s3/node_modules: local_s3/package-lock.json
	npm ci --prefix local_s3 --no-audit --no-fund --silent
	touch $@

setup: $(VENV)/.installed local_s3/node_modules

setup-run: $(VENV)/.installed-run local_s3/node_modules

migrate: setup-run
	$(BIN)/python manage.py migrate --no-input

# ONCE=1: play the demo scenario once and exit 0 only if the delivery verifies.
# (--demo seeds the demo accounts itself, once the web server is up.)
run: migrate
	DJANGO_DEBUG=$${DJANGO_DEBUG:-true} $(BIN)/python manage.py run_platform --host $(HOST) \
		--port $(PORT) --demo $(if $(ONCE),--once)

# Flower (queue and task monitor) on the broker the settings name (CELERY_BROKER_URL,
# default the embedded filesystem broker): http://$(HOST):$(FLOWER_PORT)/
flower: setup
	$(BIN)/celery -A marketplace flower --address=$(HOST) --port=$(FLOWER_PORT)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/python manage.py makemigrations --check --dry-run

test: lint
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} $(BIN)/pytest $(PYTEST_PARALLEL) $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) var
