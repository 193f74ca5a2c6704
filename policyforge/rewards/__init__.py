"""Reward models (reward VLMs, learned progress rewards) and the VecEnv reward wrapper: a later milestone."""
