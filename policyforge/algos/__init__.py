"""Learning algorithms and the training runner: PPO for every policy class (DPPO, ReinFlow, Flow-SDE, residual RL),
SAC, behaviour cloning, GAE, the replay buffer, evaluation, checkpoints, logs (TensorBoard, optional W&B) and plots;
`loaded.py` a trained run as an object that acts (`policyforge.load`). Modules are imported directly
(e.g. `from policyforge.algos.runner import Runner`)."""
