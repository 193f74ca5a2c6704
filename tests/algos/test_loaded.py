"""`policyforge.load(run).act(obs)`: the action the run's evaluation takes for the same observation, for a
single-step policy and for a chunked policy with an observation history, from batched or single-env, numpy or torch
observations; checkpoint names as `eval --checkpoint` reads them."""

import json

import numpy as np
import pytest
import torch
from rich.console import Console

import policyforge
from policyforge.algos import checkpoint
from policyforge.algos.evaluate import evaluate
from policyforge.algos.loaded import LoadedPolicy, ObservationError
from policyforge.algos.runner import EVAL_SEED_OFFSET, Runner, load_run
from policyforge.config import from_dict
from policyforge.data.collect import collect


def first_episode_returns(loaded: LoadedPolicy, num_envs: int) -> np.ndarray:
    """Each env's first-episode return, acting with `loaded.act` on the run's evaluation env (numpy observations)."""
    env = loaded.make_env(num_envs)
    obs = env.reset(seed=loaded.config.seed + EVAL_SEED_OFFSET)
    returns, finished = np.zeros(num_envs), np.zeros(num_envs, dtype=bool)
    loaded.reset()
    while not finished.all():
        action = loaded.act({key: value.numpy() for key, value in obs.items()})
        assert isinstance(action, np.ndarray) and action.shape == (num_envs, env.action_dim)
        obs, _, _, _, info = env.step(action)
        done = info["episode"]["done"].numpy()
        loaded.reset(done)
        first = done & ~finished
        returns[first] = info["episode"]["return"].numpy()[first]
        finished |= done
    env.close()
    return returns


def evaluation_steps(run_dir, num_envs: int) -> list[tuple[dict, torch.Tensor, torch.Tensor]]:
    """(obs, action, episode done) of every step `evaluate` takes on the run's evaluation env."""
    config, policy, env = load_run(run_dir, None, num_envs)
    steps, obs_before, original_step = [], [env.reset(seed=config.seed + EVAL_SEED_OFFSET)], env.step

    def recording_step(action):
        result = original_step(action)
        steps.append((obs_before[-1], torch.as_tensor(action).clone(), result[4]["episode"]["done"].clone()))
        obs_before.append(result[0])
        return result

    env.reset = lambda seed=None: obs_before[0]  # evaluate resets first: the observation recorded above
    env.step = recording_step
    evaluate(policy, env, config.seed + EVAL_SEED_OFFSET)
    env.close()
    return steps


def check_single_env_actions_match(run_dir, num_envs: int) -> None:
    """Each env's evaluation episode replayed through its own loaded policy, one unbatched observation at a time,
    gives the actions evaluation took (≤ 1e-6)."""
    steps = evaluation_steps(run_dir, num_envs)
    for env_id in range(num_envs):
        loaded = policyforge.load(run_dir)
        for obs, action, done in steps:
            single = {key: value[env_id] for key, value in obs.items()}  # torch, no batch axis
            mine = loaded.act(single)
            assert mine.shape == (action.shape[1],)
            np.testing.assert_allclose(mine, action[env_id].numpy(), atol=1e-6, rtol=0)
            if done[env_id]:
                loaded.reset()


def test_loaded_ppo_run_acts_as_its_evaluation(finished_run):
    loaded = policyforge.load(finished_run)
    summary = json.loads((finished_run / "summary.json").read_text())
    returns = first_episode_returns(loaded, loaded.config.runner.eval_envs)
    assert returns.mean() == pytest.approx(summary["eval/return"], rel=1e-5, abs=1e-5)
    check_single_env_actions_match(finished_run, 2)


def test_checkpoint_names_and_bad_observations_are_clear_errors(finished_run, tmp_path):
    with pytest.raises(
        checkpoint.CheckpointError,
        match=r"no checkpoint at 99 steps \(step_0000000099\.pt\); it keeps the checkpoints at 384, 768, 1024 steps",
    ):
        policyforge.load(finished_run, checkpoint=99)
    with pytest.raises(checkpoint.CheckpointError, match="missing"):
        policyforge.load(finished_run, checkpoint=str(tmp_path / "nothing.pt"))
    best = policyforge.load(finished_run, "best")
    assert best.policy.state_dict().keys() == policyforge.load(finished_run, 768).policy.state_dict().keys()
    with pytest.raises(ObservationError, match=r"obs\['policy'\] has shape \(2, 5\); this run's task gives \(3,\)"):
        best.act({"policy": np.zeros((2, 5), np.float32)})
    assert best.act(np.zeros(3, np.float32)).shape == (1,)  # an array alone is obs["policy"]


@pytest.fixture(scope="module")
def chunked_run(tmp_path_factory):
    """A flow policy with a 2-observation history and 4-action chunks of which 2 are executed, briefly cloned."""
    root = tmp_path_factory.mktemp("chunked")
    collect("arm-reach", 4, root / "demos", num_envs=4, seed=0, progress=False)
    settings = {
        "name": "flow",
        "out_dir": str(root),
        "sim": {"task": "arm-reach", "num_envs": 1},
        "policy": {"class": "flow", "chunk": {"n_obs_steps": 2, "horizon": 4, "act_steps": 2}, "steps": 4},
        "algo": {"class": "bc", "dataset": str(root / "demos"), "gradient_steps": 20, "steps_per_iteration": 10},
        "runner": {"eval_envs": 3, "video": "none", "tensorboard": False},
    }
    runner = Runner.start(from_dict(policyforge.algos.runner.RunConfig, settings), Console(quiet=True))
    runner.train()
    runner.close()
    return root / "flow"


def test_loaded_chunked_history_policy_acts_as_its_evaluation(chunked_run):
    loaded = policyforge.load(chunked_run)
    assert loaded.policy.n_obs_steps == 2 and loaded.policy.act_steps == 2 < loaded.policy.chunk_len
    summary = json.loads((chunked_run / "summary.json").read_text())
    assert first_episode_returns(loaded, 3).mean() == pytest.approx(summary["eval/return"], rel=1e-5, abs=1e-5)
    check_single_env_actions_match(chunked_run, 3)
