"""NoiseSteeredEnv (DSRL's noise-space environment, algos/steering.py) on pendulum-swingup with a small flow
policy as the frozen base, against a twin env driven by the base itself (`ChunkedActor`): zero noise is the base's
own behaviour step for step (until an episode ends mid-chunk: the wrapper runs the chunk out there, as PPO's
rollouts do, where the base's actor plans anew), a decision's reward is the sum of its executed steps' rewards
up to an episode end mid-chunk, the wrapper keeps the VecEnv contract, and what cannot be steered is refused
naming the setting."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from policyforge.algos.steering import NoiseSteeredEnv, SteeredPolicy
from policyforge.config import ConfigError
from policyforge.policies.chunked import ChunkConfig
from policyforge.policies.denoisers import DenoiserConfig
from policyforge.policies.flow import FlowConfig, FlowPolicy
from policyforge.policies.gaussian import GaussianConfig, GaussianPolicy
from policyforge.policies.rollout import ChunkedActor
from policyforge.sims.config import SimConfig, SteerConfig
from policyforge.sims.make import make_env
from policyforge.sims.vec_env import check_step_result

N = 6
SIM = SimConfig(task="pendulum-swingup", num_envs=N, num_threads=1, task_options={"episode_seconds": 0.35})
"""7-step episodes: with 2 actions a decision, every fourth decision ends its episode after its first step."""


def base_policy(env) -> FlowPolicy:
    torch.manual_seed(0)
    config = FlowConfig(chunk=ChunkConfig(n_obs_steps=2, horizon=4, act_steps=2), steps=3,
                        denoiser=DenoiserConfig(hidden=[32, 32], time_dim=8))  # fmt: skip
    return FlowPolicy(env.obs_shapes["policy"][0], env.action_dim, config)


def test_zero_noise_is_the_bases_own_behaviour_and_rewards_are_discounted_up_to_the_episode_end():
    twin = make_env(SIM, seed=0)
    base = base_policy(twin)
    steered = NoiseSteeredEnv(make_env(SIM, seed=0), base)
    assert steered.action_dim == 4 * 1 and steered.env_steps_per_step == 2
    assert steered.control_dt == pytest.approx(0.1) and steered.episode_steps == 4  # 7 steps: 4 decisions
    obs, twin_obs, actor = steered.reset(seed=0), twin.reset(seed=0), ChunkedActor(base, N)
    for decision in range(10):
        result = steered.step(torch.zeros(N, steered.action_dim))
        check_step_result(steered, result)
        obs, reward, terminated, truncated, info = result
        expected, done = torch.zeros(N), torch.zeros(N, dtype=torch.bool)
        for _ in range(2):
            twin_obs, twin_reward, twin_term, twin_trunc, twin_info = twin.step(actor(twin_obs))
            actor.episodes_ended(twin_term | twin_trunc)
            expected += twin_reward * ~done
            ended_now = (twin_term | twin_trunc) & ~done
            if ended_now.any():
                assert torch.equal(info["final_obs"]["policy"][ended_now], twin_info["final_obs"]["policy"][ended_now])
                assert torch.equal(info["episode"]["return"][ended_now], twin_info["episode"]["return"][ended_now])
            done |= ended_now
        if decision < 3:  # after an end mid-chunk the twin's actor plans anew; the wrapper runs out its chunk
            torch.testing.assert_close(obs["policy"], twin_obs["policy"])
        torch.testing.assert_close(reward, expected)
        assert torch.equal(truncated, done) and not terminated.any()
        if decision == 3:  # the 7th step ends each episode: the first of this decision's two
            assert done.all() and torch.equal(info["episode"]["length"], torch.full((N,), 7, dtype=torch.int32))
            break
    ends = 0
    for _ in range(8):  # the steps after an end belong to the new episode: it ends 7 steps after the last
        _, _, _, truncated, info = steered.step(torch.zeros(N, steered.action_dim))
        ends += int(truncated.sum())
        assert torch.equal(
            info["episode"]["length"][truncated], torch.full((int(truncated.sum()),), 7, dtype=torch.int32)
        )
    assert ends == 2 * N


def test_steering_noise_changes_the_bases_actions_within_the_bound_and_never_its_parameters():
    env = make_env(SIM, seed=0)
    base = base_policy(env)
    before = {k: v.clone() for k, v in base.state_dict().items()}
    steered = NoiseSteeredEnv(env, base, noise_bound=1.5)
    steered.reset(seed=0)
    action = torch.full((N, steered.action_dim), 4.0)  # beyond [-1, 1]: clamped, then scaled by the bound
    torch.testing.assert_close(steered.noise(action), torch.full((N, 4, 1), 1.5))
    obs = steered.reset(seed=0)
    chunk = base.act_from_noise(base.input_state(N).push(obs), steered.noise(action))
    assert not torch.allclose(chunk, base.act(base.input_state(N).push(obs)))
    steered.step(action)
    assert all(torch.equal(v, before[k]) for k, v in base.state_dict().items())


def test_what_cannot_be_steered_is_refused_naming_the_setting():
    env = make_env(SIM, seed=0)
    gaussian = GaussianPolicy(env.obs_shapes["policy"][0], env.action_dim, GaussianConfig(hidden=[8]))
    with pytest.raises(
        ConfigError, match=r"sim.steer.base: the base policy is a GaussianPolicy, which has no starting"
    ):
        NoiseSteeredEnv(env, gaussian)
    other = FlowPolicy(env.obs_shapes["policy"][0], 3, FlowConfig(denoiser=DenoiserConfig(hidden=[8], time_dim=8)))
    with pytest.raises(
        ConfigError, match=r"sim.steer.base: the base policy acts in 3 dimensions, the environment in 1"
    ):
        NoiseSteeredEnv(env, other)
    steered = NoiseSteeredEnv(env, base_policy(env))
    steered.reset(seed=0)
    with pytest.raises(
        ValueError, match=r"steering actions of shape \[6, 1\]: this environment takes \[N, H·A\] = \[6, 4\]"
    ):
        steered.step(torch.zeros(N, 1))
    wrong = GaussianPolicy(env.obs_shapes["policy"][0], 3, GaussianConfig(hidden=[8], squash=True))
    with pytest.raises(
        ValueError, match=r"the steering policy acts in 3 dimensions, the base's noise has 4 \(\[4, 1\], flattened\)"
    ):
        SteeredPolicy(steered.base, wrong, 1.5)


def test_sac_steers_the_run_named_in_sim_steer_counting_env_steps_and_leaving_the_base_alone(bc_flow_run, tmp_path):
    """`sim.steer.base` makes every env of a run a NoiseSteeredEnv of that run's policy; SAC trains a Gaussian over
    the noise (H·A = 4·5), the runner counts simulator steps (2 a decision), the base's checkpoint is untouched; the
    run exports as one graph of steering and base, acting at the simulator's control step."""
    from rich.console import Console

    from policyforge.algos.runner import RunConfig, Runner
    from policyforge.config import from_dict
    from policyforge.policies.export import export_run, run_exported
    from policyforge.policies.export_description import load_description

    checkpoints = {p: p.read_bytes() for p in (bc_flow_run / "checkpoints").glob("*.pt")}
    config = {
        "name": "dsrl", "out_dir": str(tmp_path),
        "sim": {"task": "arm-reach", "num_envs": 4, "steer": {"base": str(bc_flow_run), "noise_bound": 1.5}},
        "policy": {"class": "gaussian", "squash": True, "hidden": [16]},
        "algo": {"class": "sac", "learning_starts": 16, "batch_size": 16, "steps_per_iteration": 4,
                 "critic_hidden": [16]},
        "runner": {"total_env_steps": 96, "eval_envs": 2, "video": "none", "eval_every_steps": 0,
                   "tensorboard": False},
    }  # fmt: skip
    runner = Runner.start(from_dict(RunConfig, config), Console(quiet=True))
    env = runner.env
    assert isinstance(env, NoiseSteeredEnv) and env.noise_bound == 1.5
    assert runner.algo.policy.action_dim == 4 * 5 and env.env_steps_per_step == 2
    base = {k: v.clone() for k, v in env.base.state_dict().items()}
    runner.train()
    assert runner.env_steps == 96 and runner.algo.transitions == 48  # 12 decisions of 4 envs, 2 steps each
    assert runner.algo.updates > 0
    assert all(torch.equal(v, base[k]) for k, v in env.base.state_dict().items())
    steering = runner.algo.policy.eval()
    runner.close()
    assert {p: p.read_bytes() for p in (bc_flow_run / "checkpoints").glob("*.pt")} == checkpoints

    path, error, _ = export_run(tmp_path / "dsrl", "onnx")
    assert error < 1e-4
    description = load_description(path)
    assert description["chunk_len"] == 4 and description["act_steps"] == 2 and description["n_obs_steps"] == 2
    assert description["control_dt"] == pytest.approx(env.env.control_dt)  # the simulator's step, not a decision's
    obs = env.reset(seed=1)
    inputs = env.base.input_state(4).push(obs)
    with torch.no_grad():
        expected = env.base.act_from_noise(inputs, env.noise(steering.act(obs)[:, 0]))
    graph = SteeredPolicy(env.base, steering, env.noise_bound)
    np.testing.assert_allclose(run_exported(path, graph, inputs), expected.numpy(), atol=1e-4)


def test_a_base_run_of_another_task_or_none_is_refused_naming_sim_steer_base(bc_flow_run, tmp_path):
    sim = SimConfig(task="arm-push-cube", num_envs=2, steer=SteerConfig(base=str(bc_flow_run)))
    with pytest.raises(ConfigError, match=r"sim.steer.base: .*bc-flow was trained on arm-reach, this run is arm-push"):
        make_env(sim)
    sim = SimConfig(task="arm-push-cube", num_envs=2, steer=SteerConfig(base=str(tmp_path / "missing")))
    with pytest.raises(ConfigError, match=r"sim.steer.base: .*missing is not a training run .*train the base first"):
        make_env(sim)


def test_prior_actions_are_the_bases_own_noise_and_need_a_steered_base(capsys):
    from policyforge.cli import main

    steered = NoiseSteeredEnv(make_env(SIM, seed=0), base_policy(make_env(SIM)), noise_bound=2.0)
    torch.manual_seed(0)
    noise = torch.cat([steered.prior_actions() for _ in range(2000)]) * steered.noise_bound  # [N·2000, 4]
    assert noise.abs().max() <= 2.0 and abs(noise.mean()) < 0.02
    assert noise.std().item() == pytest.approx(0.94, abs=0.02)  # N(0, 1) clipped at ±2: 0.94
    assert main(["train", "configs/pendulum-swingup-sac.yaml", "algo.initial_actions=prior"]) == 2
    printed = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert "algo.initial_actions: prior draws a steered base's noise: set sim.steer.base" in printed


def test_a_snapshot_of_a_steered_env_continues_exactly():
    steered = NoiseSteeredEnv(make_env(SIM, seed=0), base_policy(make_env(SIM)), noise_bound=1.5)
    steered.reset(seed=0)
    noise = [torch.rand(N, steered.action_dim, generator=torch.Generator().manual_seed(i)) * 2 - 1 for i in range(8)]
    for action in noise[:3]:
        steered.step(action)
    snapshot = steered.get_state()
    first = [steered.step(action)[0]["policy"] for action in noise[3:]]
    steered.reset(seed=9)
    steered.set_state(snapshot)
    assert all(torch.equal(a, steered.step(action)[0]["policy"]) for a, action in zip(first, noise[3:], strict=True))
