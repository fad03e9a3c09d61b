# The two commands of the quick start; both install what they need first.
.PHONY: dev test lint

dev:
	@./scripts/dev.sh $(ARGS)

test:
	@./scripts/test.sh

lint:
	@./scripts/ensure-uv.sh
	@.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy .
