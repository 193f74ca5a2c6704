"""Policies behind one contract (`base.Policy`): Gaussian, diffusion, flow matching, VLA and residual policies — each a
module that registers its config class (`policy: {class: NAME, ...}`) — their denoisers, observation encoders and
critics, the observation normaliser, the input state and chunk execution that drive any of them in a VecEnv
(history.py, rollout.py), and ONNX / TorchScript export."""

from policyforge.policies import diffusion, flow, gaussian, residual, vla  # noqa: F401  (register the policy classes)
