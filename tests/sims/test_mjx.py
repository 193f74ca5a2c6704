"""The MJX backend against the native one: same trajectories, same auto-reset, zero-copy DLPack, clear
errors, exact snapshots, one compile per (task, N), and a policy trained on MJX working on native MuJoCo.

Tolerances (float32 MJX against float64 native MuJoCo, 100 control steps from identical states):
- pendulum-swingup, arm-reach: 2e-4 — rounding only; with `jax_enable_x64` both agree to 1e-14.
- arm-push-cube, arm-lift-cube: 1e-3 — the cube settles on the table through box–plane contacts, for
  which MJX keeps fewer contact points than native MuJoCo (a tilted box: 1 against 2), so the first steps
  differ by ~2e-4 m before the cube comes to rest in the same place.
- arm-instructed: 1e-3, as the cube tasks (three cubes; 60 steps of 4 envs keep its compile and run short).
- quadruped-walk (randomised friction, masses, PD gains): 1e-4 for 50 steps, 5e-2 by step 100 — foot
  contacts and falls amplify float32 rounding (x64: 1e-4 over 100 steps, the residue of tabulated
  mass-derived constants).
"""

import mujoco
import numpy as np
import pytest
import torch
from mjx_helpers import env_pair

from policyforge.config import ConfigError
from policyforge.sims import ImageConfig, RandomizationConfig, SimConfig, SimulationError, make_env
from policyforge.sims.mjx_env import MjxVecEnv, jax_to_torch, torch_to_jax
from policyforge.sims.parity import oscillating_actions, paired_rollout
from policyforge.sims.task import asset_path
from policyforge.sims.tasks.pendulum import PendulumSwingup

pytestmark = pytest.mark.slow

QUADRUPED_RANDOMIZATION = RandomizationConfig(
    friction=(0.5, 1.2), mass_scale=(0.85, 1.15), kp_scale=(0.8, 1.2), kd_scale=(0.8, 1.2)
)


@pytest.mark.parametrize(
    ("task", "amplitude", "tolerance"),
    [
        ("pendulum-swingup", 1.0, 2e-4),
        ("arm-reach", 0.2, 2e-4),
        ("arm-push-cube", 0.2, 1e-3),
        ("arm-lift-cube", 0.2, 1e-3),
    ],
)
def test_trajectories_match_native(task, amplitude, tolerance):
    native, mjx = env_pair(task)
    result = paired_rollout(native, mjx, oscillating_actions(100, 8, native.action_dim, amplitude))
    assert result.flags_equal and (result.first_done == 100).all()
    assert result.qpos_error.max() < tolerance, result.qpos_error.max()
    assert result.obs_error.max() < 10 * tolerance
    assert result.reward_error.max() < 10 * tolerance


def test_instructed_task_matches_native_and_reports_the_same_instructions():
    """The three-cube scene with its integer instruction ids (one compile, ~100 s on a loaded 2-core machine: 4 envs,
    60 steps; measured qpos error 2.3e-4, observation 9e-6, reward 3e-5)."""
    native, mjx = env_pair("arm-instructed", num_envs=4)
    result = paired_rollout(native, mjx, oscillating_actions(60, 4, native.action_dim, 0.2))
    assert result.flags_equal and result.qpos_error.max() < 1e-3 and result.reward_error.max() < 1e-2
    assert result.obs_error.max() < 1e-2
    assert mjx.instructions() == native.instructions() and len(set(mjx.instructions())) > 1
    assert str(mjx.state.vars["family"].dtype) == "int32"


def test_randomised_quadruped_matches_native():
    native, mjx = env_pair("quadruped-walk", randomization=QUADRUPED_RANDOMIZATION)
    actions = oscillating_actions(100, 8, native.action_dim, 0.5)
    result = paired_rollout(native, mjx, actions, QUADRUPED_RANDOMIZATION)
    assert result.flags_equal
    assert result.qpos_error[:50].max() < 1e-4 and result.qpos_error.max() < 5e-2
    assert result.reward_error.max() < 1e-2
    # the parameters really differ per env, and each env's model carries its own
    friction = np.asarray(mjx.state.model_fields["geom_friction"])[:, 0, 0]
    dr_friction = np.asarray(mjx.state.vars["dr_friction"])
    assert np.ptp(dr_friction) > 0.1
    np.testing.assert_allclose(friction, mjx.task.model.geom_friction[0, 0] * dr_friction, rtol=1e-5)


def test_auto_reset_and_final_observation_match_native():
    native, mjx = env_pair("pendulum-swingup", num_envs=4, task_options={"episode_seconds": 0.2})
    result = paired_rollout(native, mjx, oscillating_actions(native.episode_steps, 4, 1, 1.0))
    assert result.flags_equal and result.obs_error.max() < 1e-5
    # both ended their episodes at the last step: frames of the states before the reset (render(final=True)) agree,
    # and are not the new episodes' (drawn independently by each backend)
    final_n, final_m = (env.render(width=64, height=48, final=True).astype(int) for env in (native, mjx))
    assert np.abs(final_m - final_n).mean() < 0.5 < 2.0 < np.abs(final_m - mjx.render(width=64, height=48)).mean()
    for env in (native, mjx):
        env.reset(seed=3)
    for _ in range(native.episode_steps):
        out_n = native.step(torch.full((4, 1), 0.5))
        out_m = mjx.step(torch.full((4, 1), 0.5))
    (obs_n, reward_n, term_n, _, info_n), (obs_m, reward_m, term_m, trunc_m, info_m) = out_n, out_m
    assert trunc_m.all() and not term_m.any()
    # the final observation is the last one of the old episode, `obs` the first of the new one
    assert not torch.allclose(info_m["final_obs"]["policy"], obs_m["policy"])
    assert set(info_m) == set(info_n) and set(info_m["episode"]) == set(info_n["episode"])
    for key in info_n["episode"]:
        assert info_m["episode"][key].dtype == info_n["episode"][key].dtype, key
    assert (info_m["episode"]["length"] == native.episode_steps).all()
    for pair in ((obs_n["policy"], obs_m["policy"]), (reward_n, reward_m), (term_n, term_m)):
        assert pair[0].dtype == pair[1].dtype and pair[0].shape == pair[1].shape
    after = mjx.step(torch.zeros(4, 1))[4]
    assert not after["episode"]["done"].any()  # the new episodes started counting from zero


def test_reset_envs_restarts_those_envs_only_as_native_does():
    native, mjx = env_pair("pendulum-swingup", num_envs=4, task_options={"episode_seconds": 0.2})
    steps = mjx.episode_steps
    for env in (native, mjx):
        env.reset(seed=5)
        for _ in range(3):
            before = env.step(torch.full((4, 1), 0.4))[0]
        obs = env.reset_envs([1, 3])
        assert torch.equal(obs["policy"][[0, 2]], before["policy"][[0, 2]])
        assert not torch.allclose(obs["policy"][[1, 3]], before["policy"][[1, 3]])
        done = [env.step(torch.full((4, 1), 0.4))[4]["episode"]["done"].tolist() for _ in range(steps)]
        assert done[steps - 4] == [True, False, True, False] and done[steps - 1] == [False, True, False, True]


def test_dlpack_bridge_shares_memory():
    import jax.numpy as jnp

    array = jnp.arange(12.0, dtype=jnp.float32).reshape(3, 4)
    tensor = jax_to_torch(array, torch.device("cpu"))
    assert tensor.data_ptr() == array.unsafe_buffer_pointer()
    action = torch.rand(8, 5)
    assert torch_to_jax(action).unsafe_buffer_pointer() == action.data_ptr()


def test_nan_action_and_diverged_state_raise_with_env_index():
    _, mjx = env_pair("pendulum-swingup", num_envs=4, task_options={"episode_seconds": 0.2})
    mjx.reset(seed=0)
    before = np.asarray(mjx.state.data.qpos).copy()
    action = torch.zeros(4, 1)
    action[1] = float("nan")
    with pytest.raises(ValueError, match="NaN or inf in env 1"):
        mjx.step(action)
    np.testing.assert_array_equal(np.asarray(mjx.state.data.qpos), before)  # nothing was applied
    data = mjx.state.data
    mjx.state = mjx.state._replace(data=data.replace(qvel=data.qvel.at[2].set(float("inf"))))
    with pytest.raises(SimulationError, match="env 2: non-finite joint") as error:
        mjx.step(torch.zeros(4, 1))
    assert list(error.value.env_ids) == [2]


class _ImplicitPendulum(PendulumSwingup):
    name = "pendulum-implicit"

    @classmethod
    def load_model(cls, config):
        model = super().load_model(config)
        model.opt.integrator = mujoco.mjtIntegrator.mjINT_IMPLICIT
        return model


class _PotentialEnergyPendulum(PendulumSwingup):
    name = "pendulum-energy"

    @classmethod
    def load_model(cls, config):
        spec = mujoco.MjSpec.from_file(str(asset_path(PendulumSwingup.xml_file)))
        spec.option.enableflags |= mujoco.mjtEnableBit.mjENBL_ENERGY
        spec.add_sensor(name="energy", type=mujoco.mjtSensor.mjSENS_E_POTENTIAL)
        return spec.compile()


def test_unsupported_features_raise_clear_errors():
    config = PendulumSwingup.config_class()
    with pytest.raises(ConfigError, match=r"sim.backend.*MJX does not implement.*IMPLICIT"):
        MjxVecEnv(_ImplicitPendulum(_ImplicitPendulum.load_model(config), config), 2)
    with pytest.raises(ConfigError, match=r"sim.backend.*E_POTENTIAL"):
        MjxVecEnv(_PotentialEnergyPendulum(_PotentialEnergyPendulum.load_model(config), config), 2)
    with pytest.raises(ConfigError, match=r"sim\.image\.cameras"):
        make_env(SimConfig(task="arm-reach", num_envs=2, backend="mjx", image=ImageConfig(cameras=["front"])))
    with pytest.raises(ConfigError, match="com_offset"):
        make_env(
            SimConfig(
                task="quadruped-walk", num_envs=2, backend="mjx", randomization=RandomizationConfig(com_offset=0.02)
            )
        )


def test_snapshot_restores_exactly_and_programs_are_compiled_once():
    _, mjx = env_pair("pendulum-swingup", num_envs=4, task_options={"episode_seconds": 0.2})
    mjx.reset(seed=1)
    snapshot = mjx.get_state()
    actions = torch.from_numpy(oscillating_actions(12, 4, 1, 1.0))
    first = [mjx.step(a)[0]["policy"].clone() for a in actions]
    mjx.set_state(snapshot)
    second = [mjx.step(a)[0]["policy"].clone() for a in actions]
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)
    again = make_env(
        SimConfig(task="pendulum-swingup", num_envs=4, backend="mjx", task_options={"episode_seconds": 0.2})
    )
    assert again.program is mjx.program and again.compile_seconds == 0.0


def test_policy_trained_on_mjx_works_on_native(tmp_path):
    from policyforge.algos.evaluate import evaluate
    from policyforge.algos.runner import RunConfig, Runner, load_run
    from policyforge.config import load

    overrides = [
        "sim.backend=mjx",
        "runner.total_env_steps=250000",
        "runner.video=none",
        "runner.tensorboard=false",
        "runner.eval_every_steps=0",
        f"out_dir={tmp_path}",
    ]
    runner = Runner.start(load(RunConfig, "configs/pendulum-swingup-ppo.yaml", overrides))
    summary = runner.train()
    assert summary["compile_s"] >= 0 and summary["eval/success"] >= 0.75
    scores = {}
    for backend in ("mjx", "mujoco"):
        _, policy, env = load_run(runner.run_dir, num_envs=32, backend=backend)
        scores[backend] = evaluate(policy, env, seed=5)
    assert abs(scores["mujoco"]["eval/success"] - scores["mjx"]["eval/success"]) <= 0.2
    assert scores["mujoco"]["eval/return"] == pytest.approx(scores["mjx"]["eval/return"], rel=0.15)
    assert scores["mujoco"]["eval/return"] > 140
