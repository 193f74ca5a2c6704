"""Learning algorithms (PPO for every policy class, SAC, BC, distillation) and the runner: next milestone."""
