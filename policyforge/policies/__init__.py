"""Policies behind one sampler contract (policies/base.py): Gaussian, diffusion, flow-matching and residual
policies, each a module that registers its config class (`policy: {class: NAME, ...}`); the observation history
and chunk execution that drive any of them in a VecEnv (history.py, rollout.py); export to ONNX / TorchScript."""

from policyforge.policies import diffusion, flow, gaussian, residual  # noqa: F401  (register the policy classes)
