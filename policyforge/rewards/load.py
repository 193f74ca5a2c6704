"""Reward models by `sim.reward_model.kind`, and the env wrapped with one."""

from __future__ import annotations

import os
from pathlib import Path

from policyforge.config import ConfigError
from policyforge.rewards.base import RewardModel
from policyforge.rewards.config import RewardModelConfig
from policyforge.sims.config import ImageConfig, SimConfig
from policyforge.sims.vec_env import VecEnv


def transformers_checkpoint(path: str | Path, model_class: str, example: str, cameras: list[str]) -> tuple:
    """(model, tokenizer, image processor) of a transformers checkpoint directory, read offline with `model_class`
    (a transformers Auto class); ConfigError naming sim.reward_model.path (no config.json: `example` is a checkpoint
    to download) or sim.reward_model.cameras (none rendered)."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ConfigError(
            "sim.reward_model.path",
            f"{path} is not a transformers checkpoint directory (no config.json): download one where there is "
            f"internet, e.g. `hf download {example} --local-dir DIR`, and give DIR",
        )
    if not cameras:
        raise ConfigError("sim.reward_model.cameras", "this model reads a camera: render one (sim.image.cameras)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import transformers
    except ImportError as err:
        raise ImportError("kinds clip and vlm run transformers' models: pip install 'policyforge[rewards]'") from err
    model = getattr(transformers, model_class).from_pretrained(path, local_files_only=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    # the PIL image processors: torchvision (the default backend) does not load next to the CPU torch here
    processor = transformers.AutoImageProcessor.from_pretrained(path, local_files_only=True, backend="pil")
    return model, tokenizer, processor


def load_reward_model(config: RewardModelConfig, image: ImageConfig) -> RewardModel:
    """The model `config` names, on its device, in eval mode; a zero-shot one reads `config.cameras` (default: the
    first of sim.image's) at sim.image's size."""
    cameras = config.cameras or image.cameras[:1]
    if config.kind == "clip":
        from policyforge.rewards.clip import load_clip

        return load_clip(config.path, config.clip, cameras, image.height, image.width).to(config.device)
    if config.kind == "vlm":
        from policyforge.rewards.vlm import load_vlm

        return load_vlm(config.path, config.vlm, cameras, image.height, image.width).to(config.device)
    from policyforge.rewards.learned import load_learned

    if not config.ensemble:
        return load_learned(config.path, device=config.device)
    from policyforge.rewards.ensemble import RewardEnsemble

    members = [load_learned(run, device=config.device) for run in [config.path, *config.ensemble]]
    return RewardEnsemble(members, config.uncertainty_penalty)


def with_reward_model(env: VecEnv, sim: SimConfig) -> VecEnv:
    """`env` (made from `sim`) with `sim.reward_model`'s reward (`rewards.wrapper.RewardWrapper`)."""
    from policyforge.rewards.wrapper import RewardWrapper

    return RewardWrapper(env, load_reward_model(sim.reward_model, sim.image), sim.reward_model, sim.image)
