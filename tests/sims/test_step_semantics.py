"""One step semantics for every backend: the shared episode bookkeeping (`episodes.end_step`) on numpy and
jax.numpy, and each backend's `info` against the one declaration (`vec_env.StepInfo`, `check_step_result`),
with episode statistics recomputed here from the rewards and flags the backend returned."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from policyforge.sims import TASKS, SimConfig, make_env
from policyforge.sims.episodes import EpisodeCounters, end_step, where_rows
from policyforge.sims.task import NumpySampler
from policyforge.sims.vec_env import EPISODE_DTYPES, EpisodeStats, StepInfo, check_step_result

N = 4


def short_env(task: str, steps: int, backend: str = "mujoco", num_envs: int = N):
    """An env of `task` whose episodes time out after `steps` control steps."""
    if task.startswith("gym:"):
        options = {"max_episode_steps": steps}
    else:
        options = {"episode_seconds": steps * TASKS[task].config_class().control_dt}
    return make_env(SimConfig(task=task, num_envs=num_envs, backend=backend, task_options=options), seed=0)


# -- the shared helper, on numpy and on jax.numpy ------------------------------------------------------------


def _three_steps(xp, step_fn):
    """Three envs, time limit 3, through three steps: env 1 terminates at step 1, env 0 at step 3 (the limit
    step: termination wins), env 2 times out at step 3 after succeeding at step 1 only."""
    counters = EpisodeCounters.zeros(3, xp)
    steps = [
        ([1.0, 2.0, 3.0], [False, True, False], [False, False, True]),
        ([1.0, 1.0, 1.0], [False, False, False], [False, True, False]),
        ([1.0, 1.0, 0.5], [True, False, False], [False, False, False]),
    ]
    outcomes = []
    for reward, terminated, success in steps:
        outcome = step_fn(counters, xp.asarray(reward), xp.asarray(terminated), xp.asarray(success))
        counters = outcome.counters
        outcomes.append(outcome)
    return outcomes


@pytest.mark.parametrize(("xp", "jit"), [(np, False), (jnp, False), (jnp, True)], ids=["numpy", "jax", "jax-jit"])
def test_end_step_reports_finished_episodes_and_restarts_their_counters(xp, jit):
    def step_fn(counters, reward, terminated, success):
        return end_step(counters, reward, terminated, success, xp, episode_steps=3)

    first, second, third = _three_steps(xp, jax.jit(step_fn) if jit else step_fn)
    as_np = lambda tree: jax.tree.map(np.asarray, tree)  # noqa: E731
    first, second, third = as_np(first), as_np(second), as_np(third)
    # step 1: env 1 terminated after one step with return 2; its counters restart, the others accumulate
    np.testing.assert_array_equal(first.done, [False, True, False])
    np.testing.assert_array_equal(first.truncated, [False, False, False])
    np.testing.assert_array_equal(first.episode["return"], [0.0, 2.0, 0.0])
    np.testing.assert_array_equal(first.episode["length"], [0, 1, 0])
    np.testing.assert_array_equal(first.counters.returns, [1.0, 0.0, 3.0])
    np.testing.assert_array_equal(first.counters.lengths, [1, 0, 1])
    np.testing.assert_array_equal(first.counters.success_once, [False, False, True])
    # step 2: nothing ends; env 1's new episode counts from its restart
    assert not second.done.any() and not any(second.episode[key].any() for key in second.episode)
    np.testing.assert_array_equal(second.counters.lengths, [2, 1, 2])
    # step 3: the limit; env 0 terminated on it (a termination, not a truncation), env 2 times out
    np.testing.assert_array_equal(third.done, [True, False, True])
    np.testing.assert_array_equal(third.truncated, [False, False, True])
    np.testing.assert_array_equal(third.episode["return"], [3.0, 0.0, 4.5])
    np.testing.assert_array_equal(third.episode["length"], [3, 0, 3])
    np.testing.assert_array_equal(third.episode["success"], [False, False, False])
    np.testing.assert_array_equal(third.episode["success_once"], [False, False, True])
    np.testing.assert_array_equal(third.counters.returns, [0.0, 2.0, 0.0])
    np.testing.assert_array_equal(third.counters.lengths, [0, 2, 0])
    np.testing.assert_array_equal(third.counters.success_once, [False, True, False])
    assert set(third.episode) == set(EPISODE_DTYPES) == set(EpisodeStats.__annotations__)
    assert third.episode["return"].dtype == np.float32 and third.episode["done"].dtype == bool


@pytest.mark.parametrize("xp", [np, jnp], ids=["numpy", "jax"])
def test_end_step_takes_a_simulators_own_time_limit(xp):
    counters = EpisodeCounters.zeros(3, xp)
    reward, terminated = xp.ones(3), xp.asarray([True, False, False])
    outcome = end_step(counters, reward, terminated, None, xp, truncated=xp.asarray([True, True, False]))
    np.testing.assert_array_equal(outcome.truncated, [False, True, False])  # never where terminated
    np.testing.assert_array_equal(outcome.episode["length"], [1, 1, 0])
    assert not np.asarray(outcome.episode["success"]).any()  # no success flag: never a success
    with pytest.raises(ValueError, match="exactly one of episode_steps"):
        end_step(counters, reward, terminated, None, xp)
    with pytest.raises(ValueError, match="exactly one of episode_steps"):
        end_step(counters, reward, terminated, None, xp, episode_steps=3, truncated=terminated)


@pytest.mark.parametrize("xp", [np, jnp], ids=["numpy", "jax"])
def test_where_rows_takes_new_rows_where_the_mask_is_set(xp):
    old, new = xp.zeros((3, 2), dtype=xp.float32), xp.ones((3, 2))
    merged = where_rows(xp.asarray([True, False, True]), new, old, xp)
    np.testing.assert_array_equal(merged, [[1, 1], [0, 0], [1, 1]])
    assert merged.dtype == old.dtype


# -- every backend against the declaration --------------------------------------------------------------------


def run_checked(env, steps: int, seed: int = 0) -> int:
    """Step `env` with random actions, checking every result against the declaration and the episode
    statistics against sums of the rewards and flags it returned; the number of episodes that ended."""
    obs = env.reset(seed=seed)
    generator = torch.Generator().manual_seed(seed)
    returns, lengths = torch.zeros(env.num_envs, dtype=torch.float64), torch.zeros(env.num_envs, dtype=torch.int64)
    success_once = torch.zeros(env.num_envs, dtype=torch.bool)
    ended = 0
    for _ in range(steps):
        action = 0.5 * (torch.rand(env.num_envs, env.action_dim, generator=generator) * 2 - 1)
        result = env.step(action)
        check_step_result(env, result)
        next_obs, reward, terminated, truncated, info = result
        returns, lengths = returns + reward.double(), lengths + 1
        success = info.get("success", torch.zeros(env.num_envs, dtype=torch.bool))
        success_once |= success
        episode, done = info["episode"], terminated | truncated
        torch.testing.assert_close(episode["return"][done], returns[done].float(), rtol=1e-5, atol=1e-5)
        assert torch.equal(episode["length"][done], lengths[done])
        assert torch.equal(episode["success"][done], success[done])
        assert torch.equal(episode["success_once"][done], success_once[done])
        for key in obs:  # `final_obs` is `obs` where nothing ended
            assert torch.equal(info["final_obs"][key][~done], next_obs[key][~done]), key
        returns[done], lengths[done], success_once[done] = 0.0, 0, False
        ended += int(done.sum())
        obs = next_obs
    return ended


@pytest.mark.parametrize("task", [*TASKS, "gym:InvertedPendulum-v5"])
def test_native_and_gym_steps_follow_the_declaration(task):
    env = short_env(task, steps=4)
    assert run_checked(env, steps=9) >= env.num_envs  # every env ended at least one episode


def test_check_step_result_rejects_a_diverging_backend():
    """The checker is the declaration's teeth: each departure a backend could make is refused, by name."""
    env = short_env("pendulum-swingup", steps=2)
    env.reset(seed=0)
    env.step(torch.zeros(N, 1))
    obs, reward, terminated, truncated, info = env.step(torch.zeros(N, 1))  # every episode ends here
    check_step_result(env, (obs, reward, terminated, truncated, info))

    def diverged(**changes):
        return (obs, reward, terminated, truncated, {**info, **changes})

    episode = info["episode"]
    cases = {
        r'info\["episode"\]\[\'length\'\] must be torch.int64': diverged(
            episode={**episode, "length": episode["length"].int()}
        ),
        "StepInfo declares": diverged(terminal_observation=obs),
        r'info\["reward_terms"\]\[\'upright\'\] must be torch.float32 \[4\]': diverged(
            reward_terms={"upright": torch.zeros(N, 1)}
        ),
        r'info\["final_obs"\] has keys': diverged(final_obs={"policy": obs["policy"]}),
        r'info\["episode"\]\["done"\] must equal': diverged(episode={**episode, "done": ~episode["done"]}),
    }
    for message, result in cases.items():
        with pytest.raises(ValueError, match=message):
            check_step_result(env, result)
    no_reward_terms = {k: v for k, v in info.items() if k != "reward_terms"}
    with pytest.raises(ValueError, match="StepInfo declares"):
        check_step_result(env, (obs, reward, terminated, truncated, no_reward_terms))
    with pytest.raises(ValueError, match="not a time-out"):
        check_step_result(env, (obs, reward, truncated, truncated, info))
    early = {**episode, "return": episode["return"] + 1.0, "done": torch.zeros(N, dtype=torch.bool)}
    with pytest.raises(ValueError, match="zero where the episode did not end"):
        check_step_result(env, (obs, reward, terminated & False, truncated & False, {**info, "episode": early}))
    declared = StepInfo.__required_keys__ | StepInfo.__optional_keys__
    assert set(info) == declared, "pendulum-swingup has a success flag: every declared key is present"


# -- MJX: the same declaration, the same values as native ----------------------------------------------------


@pytest.mark.slow
def test_mjx_steps_follow_the_declaration_and_match_native():
    from mjx_helpers import env_pair

    native, mjx = env_pair("pendulum-swingup", num_envs=N, task_options={"episode_seconds": 0.2})
    assert run_checked(mjx, steps=2 * mjx.episode_steps + 3) >= 2 * N
    initial = native.task.reset(NumpySampler(np.random.default_rng(4)), N, np)
    native.reset_to(initial), mjx.reset_to(initial)
    generator = torch.Generator().manual_seed(1)
    ended = 0
    for _ in range(2 * native.episode_steps):  # two episodes: the second starts from each backend's own draw
        action = torch.rand(N, 1, generator=generator) * 2 - 1
        info_n, info_m = native.step(action)[4], mjx.step(action)[4]
        assert jax.tree.structure(info_n) == jax.tree.structure(info_m)
        for path, value_n in jax.tree_util.tree_leaves_with_path(info_n):
            value_m = _at(info_m, path)
            assert (value_n.dtype, value_n.shape) == (value_m.dtype, value_m.shape), path
        if ended == 0:  # the first episodes started from the same states: the same statistics
            for key in ("done", "length", "success", "success_once"):
                assert torch.equal(info_n["episode"][key], info_m["episode"][key]), key
            torch.testing.assert_close(info_n["episode"]["return"], info_m["episode"]["return"], rtol=0, atol=1e-3)
            torch.testing.assert_close(info_n["reward_terms"], info_m["reward_terms"], rtol=0, atol=1e-3)
            torch.testing.assert_close(info_n["final_obs"], info_m["final_obs"], rtol=0, atol=1e-3)
        ended += int(info_n["episode"]["done"].sum())
    assert ended == 2 * N


def _at(tree, path):
    for entry in path:
        tree = tree[entry.key]
    return tree


@pytest.mark.slow
def test_mjx_restores_snapshots_written_before_the_counters_were_shared():
    """Checkpoints of earlier versions hold a separate `steps` leaf (equal to the lengths) before the episode
    counters; they still resume exactly."""
    from mjx_helpers import env_pair

    _, mjx = env_pair("pendulum-swingup", num_envs=N, task_options={"episode_seconds": 0.2})
    mjx.reset(seed=2)
    for _ in range(3):
        mjx.step(torch.full((N, 1), 0.3))
    leaves = mjx.get_state()["mjx_leaves"]
    lengths = np.asarray(mjx.state.episodes.lengths)
    old_format = [*leaves[:-4], lengths.copy(), *leaves[-4:]]
    actions = [torch.full((N, 1), a) for a in (0.1, -0.4, 0.9, 0.2, -1.0, 0.5, 0.0, 0.7)]
    expected = [mjx.step(a)[4]["episode"]["length"].clone() for a in actions]
    mjx.set_state({"mjx_leaves": old_format})
    np.testing.assert_array_equal(np.asarray(mjx.state.episodes.lengths), lengths)
    again = [mjx.step(a)[4]["episode"]["length"].clone() for a in actions]
    assert all(torch.equal(a, b) for a, b in zip(expected, again, strict=True))
    assert any(length.any() for length in expected), "an episode ended within the replay"
