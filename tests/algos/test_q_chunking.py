"""Q-chunking (`sim.action_chunk`, sims/decisions.py): SAC's actor and critics over whole action chunks executed
open-loop. A chunk env of one action is the env itself (SAC learns exactly the same parameters through it); a
chunk of H executes H actions of the env, its reward their sum up to an episode end; the run exports as a policy
that outputs the chunk at the simulator's control step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rich.console import Console

from policyforge.algos.runner import RunConfig, Runner
from policyforge.config import ConfigError, load
from policyforge.sims.config import SimConfig
from policyforge.sims.decisions import ActionChunkEnv
from policyforge.sims.make import make_env

TINY = ["sim.num_envs=4", "algo.learning_starts=64", "algo.batch_size=32", "algo.steps_per_iteration=8",
        "runner.total_env_steps=320", "runner.eval_envs=2", "runner.video=none", "runner.eval_every_steps=0",
        "runner.tensorboard=false"]  # fmt: skip


def trained(tmp_path, name: str, *overrides: str) -> dict[str, torch.Tensor]:
    config = load(RunConfig, "configs/pendulum-swingup-sac.yaml", [*TINY, f"out_dir={tmp_path}", f"name={name}",
                                                                    *overrides])  # fmt: skip
    torch.manual_seed(0)
    runner = Runner.start(config, Console(quiet=True))
    runner.train()
    parameters = {**runner.algo.policy.state_dict(), **runner.algo.critic.state_dict()}
    runner.close()
    return parameters


def test_sac_with_a_chunk_critic_of_one_action_learns_what_the_single_action_critic_learns(tmp_path):
    single, chunked = trained(tmp_path, "single"), trained(tmp_path, "chunk1", "sim.action_chunk=1")
    assert single.keys() == chunked.keys()
    for name, value in single.items():
        assert torch.equal(value, chunked[name]), name
    other = trained(tmp_path, "chunk2", "sim.action_chunk=2")  # a chunk of two: critics over both actions
    assert other["heads.0.0.weight"].shape[1] == single["heads.0.0.weight"].shape[1] + 1


def test_a_chunk_is_its_actions_stepped_in_the_env_and_an_episode_end_is_reported_once():
    sim = SimConfig(task="pendulum-swingup", num_envs=3, num_threads=1, task_options={"episode_seconds": 0.35})
    chunked, plain = ActionChunkEnv(make_env(sim, seed=0), 3), make_env(sim, seed=0)
    assert chunked.action_dim == 3 and chunked.env_steps_per_step == 3 and chunked.episode_steps == 3  # 7 steps
    chunked.reset(seed=0)
    plain.reset(seed=0)
    rng = np.random.default_rng(0)
    for decision in range(3):
        actions = torch.as_tensor(rng.uniform(-1, 1, (3, 3)), dtype=torch.float32)
        obs, reward, _, truncated, info = chunked.step(actions)
        expected, ended = torch.zeros(3), torch.zeros(3, dtype=torch.bool)
        for i in range(3):
            plain_obs, plain_reward, _, plain_truncated, plain_info = plain.step(actions[:, i : i + 1])
            expected += plain_reward * ~ended
            if plain_truncated.any() and not ended.any():
                torch.testing.assert_close(info["final_obs"]["policy"], plain_info["final_obs"]["policy"])
            ended |= plain_truncated
        torch.testing.assert_close(obs["policy"], plain_obs["policy"])
        torch.testing.assert_close(reward, expected)
        assert torch.equal(truncated, ended) and truncated.all() == (decision == 2)  # the 7th step: decision 3
    with pytest.raises(ValueError, match=r"chunk actions of shape \[3, 1\]: this environment takes \[N, H·A\] = "
                                         r"\[3, 3\] \(3 actions of 1, flattened\)"):  # fmt: skip
        chunked.step(torch.zeros(3, 1))
    with pytest.raises(ConfigError, match=r"sim.action_chunk: a steered env already acts in its base's chunks"):
        load(RunConfig, "configs/pendulum-swingup-sac.yaml", ["sim.action_chunk=2", "sim.steer.base=runs/x"])


def test_a_chunked_run_exports_a_policy_that_outputs_the_whole_chunk(tmp_path):
    from policyforge.policies.export import export_run
    from policyforge.policies.export_description import load_description

    trained(tmp_path, "chunk4", "sim.action_chunk=4")
    path, error, _ = export_run(tmp_path / "chunk4", "onnx")
    assert error < 1e-4
    description = load_description(path)
    assert description["chunk_len"] == 4 and description["act_steps"] == 4
    assert description["control_dt"] == pytest.approx(make_env(SimConfig(num_envs=1)).control_dt)
