"""PPO's fine-tuning options (DPPO, GRPO, residual, BC term) and the guards against the anchors' known bugs:
evaluation uses the fine-tuned weights, `done` comes from the env, ratios cover only executed actions."""

from pathlib import Path

import pytest
import torch
from rich.console import Console

from policyforge.algos import checkpoint
from policyforge.algos.gae import group_relative_advantages
from policyforge.algos.ppo import PPO, denoising_schedules
from policyforge.algos.ppo_config import PPOConfig
from policyforge.algos.runner import RunConfig, Runner, load_run
from policyforge.config import ConfigError, from_dict
from policyforge.policies.diffusion import DiffusionConfig, DiffusionPolicy

CHUNK = {"n_obs_steps": 2, "horizon": 4, "act_steps": 2}
SMALL = {"hidden": [32, 32], "time_dim": 8}
FLOW = {"policy": {"class": "flow", "chunk": CHUNK, "steps": 3, "denoiser": SMALL}}
DIFFUSION = {"policy": {"class": "diffusion", "chunk": CHUNK, "inference_steps": 3, "denoiser": SMALL}}
QUIET = {"eval_envs": 4, "video": "none", "tensorboard": False}


def run_config(tmp_path, name, **settings) -> RunConfig:
    base = {
        "name": name,
        "out_dir": str(tmp_path),
        "sim": {"task": "pendulum-swingup", "num_envs": 8},
        "algo": {"rollout_steps": 8, "epochs": 2, "minibatches": 2},
        "runner": {"total_env_steps": 256, **QUIET},
    }
    return from_dict(RunConfig, {**base, **settings})


def test_denoising_schedules_follow_dppo():
    weight, clip = denoising_schedules(5, discount=0.9, clip_last=0.01, clip_first=0.001)
    torch.testing.assert_close(weight, torch.tensor([0.9**4, 0.9**3, 0.9**2, 0.9, 1.0]))
    assert clip[0] == pytest.approx(0.001) and clip[-1] == pytest.approx(0.01)
    assert torch.all(clip[1:] > clip[:-1])
    assert clip[2] < (0.001 + 0.01) / 2  # exponential: small for most steps, rising near the last
    weight, clip = denoising_schedules(1, discount=0.9, clip_last=0.2, clip_first=0.05)
    assert weight.tolist() == [1.0] and clip.tolist() == pytest.approx([0.2])


def make_ppo(**options) -> PPO:
    config = from_dict(DiffusionConfig, {"chunk": CHUNK, "inference_steps": 3, "denoiser": SMALL})
    policy = DiffusionPolicy(3, 1, config)
    return PPO(policy, critic_obs_dim=3, num_envs=4, config=PPOConfig(**options), total_iterations=1)


def test_ratios_cover_only_the_executed_actions_and_clamp_each_element():
    torch.manual_seed(0)
    ppo = make_ppo(ratio="per_step", log_prob_clamp=(-5.0, 2.0))
    obs = {"policy": torch.randn(6, 2, 3)}
    chain = ppo.policy.sample(obs).chain  # [B, K + 1, H, A]
    score, _ = ppo._score(obs, chain)
    assert score.shape == (6, 3)
    unexecuted = chain.clone()
    unexecuted[:, -1, 2:] += 10.0  # final actions that are never executed
    torch.testing.assert_close(ppo._score(obs, unexecuted)[0], score)
    executed = chain.clone()
    executed[:, -1, :2] += 10.0  # executed ones, far from the step's mean: every element hits the lower clamp
    clamped, _ = ppo._score(obs, executed)
    torch.testing.assert_close(clamped[:, -1], torch.full((6,), -5.0))
    torch.testing.assert_close(clamped[:, :-1], score[:, :-1])


def test_group_relative_advantages_standardise_returns_within_groups():
    rewards = torch.tensor([[1.0, 0.0, 2.0, 2.0], [1.0, 1.0, 0.0, 2.0], [0.0, 5.0, 1.0, 0.0]])  # [T=3, N=4]
    dones = torch.tensor([[0, 0, 0, 0], [1, 1, 0, 1], [0, 0, 1, 0]], dtype=torch.bool)
    advantages, mask = group_relative_advantages(rewards, dones, group_size=2)
    # group 0 finished episodes with returns 2 (env 0) and 1 (env 1): ±1 after standardising
    torch.testing.assert_close(advantages[:2, 0], torch.ones(2), atol=1e-5, rtol=0)
    torch.testing.assert_close(advantages[:2, 1], -torch.ones(2), atol=1e-5, rtol=0)
    # group 1: env 2's return 3 and env 3's 4
    torch.testing.assert_close(advantages[:, 2], -torch.ones(3), atol=1e-5, rtol=0)
    torch.testing.assert_close(advantages[:2, 3], torch.ones(2), atol=1e-5, rtol=0)
    # the episodes that start at t = 2 in envs 0, 1 and 3 don't finish: no advantage
    assert mask.tolist() == [[True] * 4, [True] * 4, [False, False, True, False]]
    assert advantages[~mask].abs().sum() == 0


def test_grpo_trains_only_on_finished_episodes(tmp_path):
    settings = {"sim": {"task": "pendulum-swingup", "num_envs": 8, "task_options": {"episode_seconds": 0.5}}}
    config = run_config(tmp_path, "grpo", **FLOW, **settings, algo={"rollout_steps": 8, "advantage": "grpo",
                                                                   "group_size": 4})  # fmt: skip
    runner = Runner.start(config, Console(quiet=True))
    before = {k: v.clone() for k, v in runner.algo.policy.state_dict().items()}
    runner.obs, metrics = runner.algo.iterate(runner.env, runner.obs, lambda info: None)
    episode = 10 // CHUNK["act_steps"]  # 0.5 s at 20 Hz = 10 steps = 5 decisions; 3 of 8 are left running
    assert metrics["loss/decisions"] == 8 * episode
    assert any(not torch.equal(v, before[k]) for k, v in runner.algo.policy.state_dict().items())
    runner.close()
    with pytest.raises(ConfigError, match="group_size"):
        Runner.start(run_config(tmp_path, "odd", **FLOW, algo={"advantage": "grpo", "group_size": 3}))


def test_done_comes_from_the_env(tmp_path, record_steps):
    """Episodes that end on success (terminated) or time-out end their decision; none is assumed."""
    task_options = {"terminate_on_success": True, "success_threshold": 0.25, "episode_seconds": 0.4}
    sim = {"task": "arm-reach", "num_envs": 16, "task_options": task_options}
    runner = Runner.start(run_config(tmp_path, "done", **FLOW, sim=sim), Console(quiet=True))
    steps = record_steps(runner.env)
    batch, _ = runner.algo._collect(runner.env, runner.obs, lambda info: None)
    terminated = torch.stack([s[2] for s in steps]).view(8, 2, 16)  # [T, act_steps, N]
    truncated = torch.stack([s[3] for s in steps]).view(8, 2, 16)
    assert terminated.any() and truncated.any() and not (terminated | truncated).all()
    assert torch.equal(batch["done"], (terminated | truncated).any(1))
    runner.close()


def bc_like_start(tmp_path, settings: dict) -> Path:
    """A short PPO run standing in for a pre-trained policy to start from."""
    Runner.start(run_config(tmp_path, "start", **settings), Console(quiet=True)).train()
    return tmp_path / "start"


@pytest.mark.parametrize("per_step", [False, True])
def test_residual_needs_a_base_and_trains_only_the_residual(tmp_path, per_step):
    residual = {"policy": {"class": "residual", "base": FLOW["policy"], "hidden": [32], "per_step": per_step}}
    with pytest.raises(ConfigError, match="init_policy"):
        run_config(tmp_path, "no-base", **residual)
    start = bc_like_start(tmp_path, FLOW)
    runner = Runner.start(run_config(tmp_path, "residual", **residual, init_policy=str(start)), Console(quiet=True))
    initial = {k: v.clone() for k, v in runner.algo.policy.state_dict().items()}
    runner.train()
    trained = runner.algo.policy.state_dict()
    changed = {k for k, v in trained.items() if not torch.equal(v, initial[k])}
    assert changed and all(not k.startswith("base.") for k in changed)
    runner.close()


def test_per_step_residual_resumes_exactly(tmp_path):
    """The base's chunks in flight (history, chunk, cursor per env) are part of the checkpoint: a run stopped
    mid-chunk and resumed ends with the parameters of an uninterrupted one."""
    start = bc_like_start(tmp_path, FLOW)
    residual = {"policy": {"class": "residual", "base": FLOW["policy"], "hidden": [32], "per_step": True}}
    settings = {**residual, "init_policy": str(start), "algo": {"rollout_steps": 7, "epochs": 1}}
    runs = {}
    for name, steps in (("whole", 560), ("split", 280)):
        config = run_config(tmp_path, name, **settings, runner={"total_env_steps": steps, "eval_envs": 2, **QUIET})
        Runner.start(config, Console(quiet=True)).train()
        runs[name] = tmp_path / name
    resumed = Runner.resume(runs["split"], Console(quiet=True), ["runner.total_env_steps=560"])
    assert resumed.algo.history.base.cursor.tolist() != [2] * 8  # 7-step rollouts stop inside 2-action chunks
    resumed.train()
    whole, split = (checkpoint.read(runs[n] / "checkpoints" / "latest.pt")["algo"] for n in runs)
    for name, value in whole["policy"].items():
        assert torch.equal(value, split["policy"][name]), name


def test_evaluation_and_loading_use_the_fine_tuned_weights(tmp_path):
    """The anchors' bug: evaluating the frozen base instead of the fine-tuned policy."""
    start = bc_like_start(tmp_path, FLOW)
    settings = {"policy": {**FLOW["policy"], "chain_noise": "reinflow"}}
    runner = Runner.start(run_config(tmp_path, "tuned", **settings, init_policy=str(start)), Console(quiet=True))
    runner.train()
    tuned = runner.algo.policy
    (_, loaded, env), (_, initial, start_env) = load_run(tmp_path / "tuned"), load_run(start)
    env.close(), start_env.close()
    obs = tuned.example_obs(5)
    obs["policy"].normal_()
    act = lambda policy: (torch.manual_seed(0), policy.act(obs))[1]  # noqa: E731  same initial noise
    torch.testing.assert_close(act(loaded), act(tuned))
    assert not torch.allclose(act(loaded), act(initial), atol=1e-4)
    runner.close()


def test_bc_term_pulls_towards_the_frozen_initial_policy(tmp_path):
    """`bc_coef`: the policy's own bc_loss on the initial policy's actions; the anchor survives a checkpoint."""
    start = bc_like_start(tmp_path, FLOW)
    config = run_config(tmp_path, "bc-term", **FLOW, init_policy=str(start), algo={"rollout_steps": 8, "bc_coef": 1.0})
    runner = Runner.start(config, Console(quiet=True))
    runner.obs, metrics = runner.algo.iterate(runner.env, runner.obs, lambda info: None)
    anchor = runner.algo.anchor
    assert metrics["loss/bc_loss"] > 0 and anchor is not None
    initial = load_run(start)
    initial[2].close()
    for name, value in initial[1].state_dict().items():
        assert torch.equal(anchor.state_dict()[name], value), name
    assert not any(p.requires_grad for p in anchor.parameters())
    state = runner.algo.state_dict()
    fresh = Runner.start(run_config(tmp_path, "fresh", **FLOW, algo={"bc_coef": 1.0}), Console(quiet=True))
    fresh.algo.load_state_dict(state)
    for name, value in anchor.state_dict().items():
        assert torch.equal(fresh.algo.anchor.state_dict()[name], value), name
    runner.close(), fresh.close()


def test_reinflow_trainable_steps_leave_the_frozen_steps_alone(tmp_path):
    """`algo.trainable_steps` on ReinFlow: a PPO iteration moves the trainable steps (their noise network too) and
    not the frozen ones, whose densities PPO's ratio leaves out: with the same noise, the chain is unchanged up to
    the first trainable step."""
    settings = {**FLOW, "algo": {"rollout_steps": 8, "trainable_steps": 1, "entropy_coef": 0.01}}
    runner = Runner.start(run_config(tmp_path, "reinflow-k1", **settings), Console(quiet=True))
    policy = runner.algo.policy
    assert policy.config.chain_noise == "reinflow" and policy.frozen_steps == 2
    obs = policy.example_obs(16)
    obs["policy"].normal_()

    def state_and_chain() -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        torch.manual_seed(0)
        with torch.no_grad():
            chain = policy.sample(obs).chain  # [B, K + 1, H, A]
        return {k: v.clone() for k, v in policy.state_dict().items()}, chain

    before, chain_before = state_and_chain()
    runner.obs, _ = runner.algo.iterate(runner.env, runner.obs, lambda info: None)
    after, chain_after = state_and_chain()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert any(k.startswith("noise_net.") for k in changed) and any(k.startswith("denoiser.") for k in changed)
    assert not any(k.startswith("base.") for k in changed)
    torch.testing.assert_close(chain_after[:, :3], chain_before[:, :3], rtol=0, atol=0)
    assert not torch.allclose(chain_after[:, 3], chain_before[:, 3])
    runner.close()
