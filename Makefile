# The README commands: `make demo` (main job), `make test` (everything; CI) and `make test-fast` (the inner loop:
# the tests not marked slow). All set up .venv on first use. `make test-lerobot` runs the LeRobot SmolVLA wrapper's
# tests in the optional .venv-lerobot (`make setup-lerobot`; in .venv they are skipped).
PY := .venv/bin/python
STAMP := .venv/.installed

.PHONY: demo test test-fast lint setup setup-lerobot test-lerobot
setup: $(STAMP)
LEROBOT_STAMP := .venv-lerobot/.installed
setup-lerobot: $(LEROBOT_STAMP)

$(LEROBOT_STAMP): pyproject.toml scripts/setup_lerobot.sh scripts/requirements-lerobot.txt
	bash scripts/setup_lerobot.sh
	touch $(LEROBOT_STAMP)

test-lerobot: $(LEROBOT_STAMP)
	.venv-lerobot/bin/python -m pytest -q tests/policies/test_smolvla.py

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
