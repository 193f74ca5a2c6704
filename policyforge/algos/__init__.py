"""Learning algorithms and the training runner: PPO for every policy class (DPPO, ReinFlow, Flow-SDE, residual RL),
SAC, behaviour cloning, GAE, the replay buffer, evaluation, checkpoints, logs and plots. Modules are imported directly
(e.g. `from policyforge.algos.runner import Runner`)."""
