"""Policies behind one contract (`base.Policy`): Gaussian, diffusion, flow matching and residual policies, their
denoisers, observation encoders and critics, the observation normaliser, rollout helpers and ONNX / TorchScript
export. Modules are imported directly (e.g. `from policyforge.policies.flow import FlowPolicy`)."""
