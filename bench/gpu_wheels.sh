#!/usr/bin/env bash
# Download, on this machine, the Python 3.12 wheels the GPU machine's image lacks (it has torch, JAX with CUDA,
# numpy, scipy, rich, matplotlib, tensorboard, imageio, pyyaml, absl-py, etils) into .whl/, which
# .git/info/exclude ignores and the device tool carries (about 38 MB of the 64 MB it may carry).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
mkdir -p .whl
for spec in mujoco==3.17.0 mujoco-mjx==3.17.0 glfw pyopengl trimesh gymnasium farama-notifications; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d .whl "$spec"
done
ls -la .whl
