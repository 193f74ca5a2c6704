"""One PPO for every policy class: chunked policies run through the same algorithm (decisions execute
`act_steps` actions of each chunk), with no class-specific code in PPO."""

import pytest
import torch
from rich.console import Console

from policyforge.algos.runner import RunConfig, Runner
from policyforge.config import from_dict

CHUNK = {"n_obs_steps": 2, "horizon": 4, "act_steps": 2}
SMALL = {"hidden": [32, 32], "time_dim": 8}
CLASSES = {
    "gaussian": {"class": "gaussian", "hidden": [32, 32]},
    "diffusion": {"class": "diffusion", "chunk": CHUNK, "inference_steps": 3, "denoiser": SMALL},
    "flow_reinflow": {"class": "flow", "chunk": CHUNK, "steps": 3, "denoiser": SMALL},
    "flow_sde": {"class": "flow", "chunk": CHUNK, "steps": 3, "chain_noise": "sde", "denoiser": SMALL},
}


@pytest.mark.parametrize("name", list(CLASSES))
def test_ppo_updates_every_policy_class(tmp_path, name):
    settings = {
        "name": name,
        "out_dir": str(tmp_path),
        "sim": {"task": "pendulum-swingup", "num_envs": 8},
        "algo": {"rollout_steps": 8, "epochs": 2, "minibatches": 2},
        "runner": {"total_env_steps": 256, "eval_envs": 2, "video": "none", "tensorboard": False},
        "policy": CLASSES[name],
    }
    runner = Runner.start(from_dict(RunConfig, settings), Console(quiet=True))
    before = {k: v.clone() for k, v in runner.algo.policy.state_dict().items()}
    summary = runner.train()
    act_steps = CHUNK["act_steps"] if name != "gaussian" else 1
    assert summary["env_steps"] == 256 and summary["iterations"] == 256 // (8 * 8 * act_steps)
    changed = [k for k, v in runner.algo.policy.state_dict().items() if not torch.equal(v, before[k])]
    assert any("normalizer" not in k for k in changed)
    runner.close()


def test_ppo_fine_tunes_from_an_initial_policy(tmp_path):
    """`init_policy` starts PPO from another run's policy (e.g. a BC run) instead of a fresh one."""
    settings = {
        "out_dir": str(tmp_path),
        "sim": {"task": "pendulum-swingup", "num_envs": 8},
        "algo": {"rollout_steps": 8, "epochs": 1, "minibatches": 1},
        "runner": {"total_env_steps": 128, "eval_envs": 2, "video": "none", "tensorboard": False},
        "policy": CLASSES["flow_reinflow"],
    }
    first = Runner.start(from_dict(RunConfig, {**settings, "name": "first", "seed": 1}), Console(quiet=True))
    first.train()
    second = Runner(from_dict(RunConfig, {**settings, "name": "second", "init_policy": str(tmp_path / "first")}),
                    tmp_path / "second", Console(quiet=True))  # fmt: skip
    for name, value in first.algo.policy.state_dict().items():
        assert torch.equal(value, second.algo.policy.state_dict()[name]), name


def test_a_decision_earns_the_discounted_rewards_of_its_executed_steps(tmp_path, record_steps):
    """Rewards of the act_steps actions are summed with γ^i up to the episode's end (the time-out bootstrapped
    from the true final observation); later steps of that chunk belong to no decision."""
    settings = {
        "name": "rewards",
        "out_dir": str(tmp_path),
        "sim": {"task": "pendulum-swingup", "num_envs": 4, "task_options": {"episode_seconds": 0.25}},  # 5 steps
        "algo": {"rollout_steps": 4, "scale_rewards": False, "gamma": 0.9},
        "policy": CLASSES["flow_reinflow"],
    }
    runner = Runner.start(from_dict(RunConfig, settings), Console(quiet=True))
    algo, env = runner.algo, runner.env
    steps = record_steps(env)
    batch, _ = algo._collect(env, runner.obs, lambda info: None)
    rewards = torch.stack([s[1] for s in steps])  # [8, N]
    truncated = torch.stack([s[3] for s in steps])
    assert truncated[4].all() and not truncated[:4].any()  # the episode ends inside decision 2 (steps 4, 5)
    final_value = algo.critic({"critic": steps[4][4]["final_obs"]["critic"]})
    torch.testing.assert_close(batch["reward"][0], rewards[0] + 0.9 * rewards[1])
    torch.testing.assert_close(batch["reward"][2], rewards[4] + 0.9 * final_value)  # step 5 is the next episode's
    assert batch["done"][2].all() and not batch["done"][[0, 1, 3]].any()
    runner.close()


def test_fine_tuning_keeps_the_pre_trained_normaliser(tmp_path):
    settings = {
        "out_dir": str(tmp_path),
        "sim": {"task": "pendulum-swingup", "num_envs": 8},
        "policy": CLASSES["gaussian"],
    }
    assert from_dict(RunConfig, settings).algo.update_policy_normalizer is True
    tuned = from_dict(RunConfig, {**settings, "init_policy": "runs/somewhere"})
    assert tuned.algo.update_policy_normalizer is False
    forced = from_dict(RunConfig, {**settings, "init_policy": "x", "algo": {"update_policy_normalizer": True}})
    assert forced.algo.update_policy_normalizer is True


def test_critic_warm_up_leaves_the_policy_alone(tmp_path):
    settings = {
        "name": "warmup",
        "out_dir": str(tmp_path),
        "sim": {"task": "pendulum-swingup", "num_envs": 8},
        "algo": {"rollout_steps": 8, "epochs": 2, "minibatches": 2, "critic_warmup_iterations": 2},
        "policy": CLASSES["flow_reinflow"],
    }
    runner = Runner.start(from_dict(RunConfig, settings), Console(quiet=True))
    policy, critic = runner.algo.policy, runner.algo.critic
    weights = lambda module: {k: v.clone() for k, v in module.state_dict().items() if "normalizer" not in k}  # noqa: E731
    policy_start, critic_start = weights(policy), weights(critic)
    for _ in range(2):
        runner.obs, _ = runner.algo.iterate(runner.env, runner.obs, lambda info: None)
    assert all(torch.equal(v, policy_start[k]) for k, v in weights(policy).items())
    assert not all(torch.equal(v, critic_start[k]) for k, v in weights(critic).items())
    runner.obs, _ = runner.algo.iterate(runner.env, runner.obs, lambda info: None)
    assert not all(torch.equal(v, policy_start[k]) for k, v in weights(policy).items())
    runner.close()


def test_an_image_policys_first_ratio_is_exactly_one(tmp_path):
    """PPO rescores in eval mode: the image encoder's random-shift augmentation (on while training BC) would give
    each rescoring other inputs, so the ratios would move before the policy does."""
    settings = {
        "name": "image-ratio",
        "out_dir": str(tmp_path),
        "sim": {"task": "arm-reach", "num_envs": 4, "image": {"cameras": ["front"], "width": 32, "height": 32}},
        "algo": {"rollout_steps": 4, "epochs": 1, "minibatches": 1},
        "runner": {"total_env_steps": 32, "eval_envs": 2, "video": "none", "tensorboard": False},
        "policy": {**CLASSES["flow_sde"], "encoder": {"random_shift": 4, "image_channels": 8, "image_features": 16}},
    }
    runner = Runner.start(from_dict(RunConfig, settings), Console(quiet=True))
    runner.algo.policy.train()  # as a BC run leaves it
    _, metrics = runner.algo.iterate(runner.env, runner.obs, lambda info: None)
    assert metrics["loss/approx_kl"] == 0.0 and metrics["loss/clip_fraction"] == 0.0
    runner.close()
