"""Policies behind one contract (`base.Policy`): Gaussian, diffusion, flow matching, VLA, SmolVLA (LeRobot's) and
residual policies — each a module that registers its config class (`policy: {class: NAME, ...}`) — their denoisers,
observation encoders and critics, the observation normaliser, the input state and chunk execution that drive any of
them in a VecEnv (history.py, rollout.py), and ONNX / TorchScript export."""

# smolvla registers `class: smolvla` only where lerobot is installed (the optional .venv-lerobot, make setup-lerobot)
from policyforge.policies import diffusion, flow, gaussian, residual, smolvla, vla  # noqa: F401  (register the classes)
