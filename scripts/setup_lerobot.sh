#!/usr/bin/env bash
# Creates .venv-lerobot: the optional environment for LeRobot's SmolVLA (policy.class: smolvla). The main .venv is
# untouched; scripts/requirements-lerobot.txt says why the two cannot be one. About 9 GB (torch's CUDA libraries).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
[ -x .venv-lerobot/bin/python ] || "$PYTHON" -m venv .venv-lerobot
.venv-lerobot/bin/pip install -q --upgrade pip
# a lock, installed as is: lerobot's own metadata would pull other torch/torchvision builds
.venv-lerobot/bin/pip install -q --no-deps -r scripts/requirements-lerobot.txt
# policyforge itself, without its pins (diffusers>=0.42 and torch==2.13.0 are the ones this environment replaces)
.venv-lerobot/bin/pip install -q --no-deps -e .
.venv-lerobot/bin/python -c "import lerobot.policies.smolvla.modeling_smolvla, policyforge.policies.smolvla as s; assert s.LEROBOT_INSTALLED"
echo "LeRobot environment ready in .venv-lerobot (make test-lerobot)"
