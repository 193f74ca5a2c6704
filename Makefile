# The two README commands: `make demo` (main job) and `make test`. Both set up .venv on first use.
PY := .venv/bin/python
STAMP := .venv/.installed

.PHONY: demo test lint setup
setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $(STAMP)

demo: $(STAMP)
	.venv/bin/policyforge demo

test: $(STAMP)
	.venv/bin/ruff check policyforge tests bench
	.venv/bin/python -m pytest -q

lint: $(STAMP)
	.venv/bin/ruff format --check policyforge tests bench
	.venv/bin/ruff check policyforge tests bench
