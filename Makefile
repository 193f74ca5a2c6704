# The README commands: `make demo` (main job), `make test` (everything; CI) and `make test-fast` (the inner loop:
# the tests not marked slow). All set up .venv on first use.
PY := .venv/bin/python
STAMP := .venv/.installed

.PHONY: demo test test-fast lint setup
setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $(STAMP)

demo: $(STAMP)
	.venv/bin/policyforge demo

test: $(STAMP)
	.venv/bin/ruff check policyforge tests bench
	.venv/bin/python -m pytest -q

test-fast: $(STAMP)
	.venv/bin/ruff check policyforge tests bench
	.venv/bin/python -m pytest -q -m "not slow"

lint: $(STAMP)
	.venv/bin/ruff format --check policyforge tests bench
	.venv/bin/ruff check policyforge tests bench
