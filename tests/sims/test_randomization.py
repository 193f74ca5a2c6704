"""Per-environment physical parameters: sampled from the configured ranges, different per env, applied."""

import numpy as np
import pytest
import torch

from policyforge.config import ConfigError
from policyforge.sims import RandomizationConfig, SimConfig, make_env


def quadruped(randomization: RandomizationConfig, num_envs: int = 6):
    options = {"init_joint_noise": 0.0}  # identical initial states: only the physics may differ
    return make_env(
        SimConfig(task="quadruped-walk", num_envs=num_envs, task_options=options, randomization=randomization)
    )


def heights_after(env, steps: int = 25) -> np.ndarray:
    for _ in range(steps):
        env.step(torch.zeros(env.num_envs, 12))
    return env.task.sensor(env.phys["sensordata"], "position")[:, 2].copy()


def test_parameters_differ_per_env_within_ranges_and_reach_the_model():
    cfg = RandomizationConfig(friction=(0.5, 1.2), mass_scale=(0.8, 1.2), kp_scale=(0.7, 1.3), kd_scale=(0.5, 2.0))
    env = quadruped(cfg)
    vars_, model = env.vars, env.task.model
    for name, (low, high) in [("dr_friction", cfg.friction), ("dr_mass", cfg.mass_scale), ("dr_kp", cfg.kp_scale)]:
        assert np.all((vars_[name] >= low) & (vars_[name] <= high)) and np.unique(vars_[name]).size == env.num_envs
    np.testing.assert_allclose(
        env.batch.expand("geom_friction")[:, :, 0], model.geom_friction[:, 0] * vars_["dr_friction"][:, None]
    )
    np.testing.assert_allclose(env.batch.expand("body_mass"), model.body_mass * vars_["dr_mass"][:, None])
    kp = env.batch.expand("actuator_gainprm")[:, :, 0]
    np.testing.assert_allclose(kp, model.actuator_gainprm[:, 0] * vars_["dr_kp"][:, None])
    np.testing.assert_allclose(env.batch.expand("actuator_biasprm")[:, :, 1], -kp)
    kd = -env.batch.expand("actuator_biasprm")[:, :, 2]
    np.testing.assert_allclose(kd, -model.actuator_biasprm[:, 2] * vars_["dr_kd"][:, None])
    critic_friction = env.reset(seed=0)["critic"][:, 45 + 3 + 1 + 4].numpy()  # after policy, velocity, height, contacts
    np.testing.assert_allclose(critic_friction, env.vars["dr_friction"], rtol=1e-6)


@pytest.mark.parametrize("field", ["mass_scale", "kp_scale"])
def test_randomised_parameters_change_the_dynamics(field):
    same = heights_after(quadruped(RandomizationConfig()))
    assert np.ptp(same) < 1e-9, "without randomisation identical envs stay identical"
    varied = heights_after(quadruped(RandomizationConfig(**{field: (0.6, 1.4)})))
    assert np.ptp(varied) > 1e-3, f"{field} must change how the robot sags"


def test_resample_on_reset_draws_new_parameters():
    cfg = RandomizationConfig(mass_scale=(0.5, 1.5), resample_on_reset=True)
    env = make_env(
        SimConfig(task="pendulum-swingup", num_envs=3, randomization=cfg, task_options={"episode_seconds": 0.1})
    )
    before = env.vars["dr_mass"].copy()
    env.step(torch.zeros(3, 1))
    env.step(torch.zeros(3, 1))  # episodes of 2 steps: all envs reset here
    assert not np.allclose(before, env.vars["dr_mass"])
    np.testing.assert_allclose(env.batch.expand("body_mass")[:, 1], env.task.model.body_mass[1] * env.vars["dr_mass"])


def test_kp_randomisation_needs_pd_actuators():
    with pytest.raises(ConfigError, match=r"sim\.randomization\.kp_scale: task pendulum-swingup has no PD"):
        make_env(SimConfig(task="pendulum-swingup", num_envs=1, randomization=RandomizationConfig(kp_scale=(0.9, 1.1))))


@pytest.mark.parametrize("backend", ["mujoco", "mjx"])
def test_a_push_fires_at_its_interval_on_both_backends(backend):
    """`push_interval_s`: every 0.5 s (25 steps) of each episode the trunk's horizontal velocity jumps by up to
    push_velocity per axis; in between, standing still, it changes by a few cm/s a step."""
    config = RandomizationConfig(push_interval_s=0.5, push_velocity=0.8)
    env = make_env(SimConfig(task="quadruped-walk", num_envs=16, backend=backend, randomization=config), seed=0)
    env.reset(seed=0)
    velocity = []
    for _ in range(100):
        obs, *_ = env.step(torch.zeros(16, 12))
        velocity.append(obs["critic"][:, 45:47])  # the trunk's velocity in its own frame (upright: x, y)
    jumps = (torch.diff(torch.stack(velocity), dim=0)).norm(dim=2).mean(dim=1)  # [99]: into step k + 2
    pushed = torch.zeros(99, dtype=torch.bool)
    pushed[[23, 48, 73, 98]] = True  # steps 25, 50, 75 and 100 of the episode
    assert jumps[pushed].min() > 3 * jumps[~pushed].max(), jumps
    assert jumps[pushed].max() < 0.8 * 2**0.5  # uniform per axis within ±0.8 m/s, averaged over the envs
    with pytest.raises(ConfigError, match=r"sim\.randomization\.push_interval_s: task pendulum-swingup has no free"):
        make_env(SimConfig(task="pendulum-swingup", num_envs=2, randomization=config))
