"""Reward models: camera frames and the instruction → progress and success, for robots without a success flag.

- `base`: the contract (`RewardModel.score`, `RewardInputs`, `RewardScores`, `check_frames`);
- `wrapper`: `RewardWrapper`, a VecEnv whose reward is a model's (`sim.reward_model`, `config.RewardModelConfig`);
- `learned`: the compact language-conditioned progress + success model trained here (`algo: reward_model`), with
  its labels (`labels`) and held-out figures (`metrics`);
- `load.load_reward_model`: a model by `sim.reward_model.kind` and path.
"""

from policyforge.rewards.base import RewardInputs, RewardModel, RewardScores, check_frames
from policyforge.rewards.config import RewardModelConfig

__all__ = ["RewardInputs", "RewardModel", "RewardModelConfig", "RewardScores", "check_frames"]
