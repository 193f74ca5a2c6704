"""Off-policy residual RL (SAC on a per-step residual over a frozen chunked base, ResFiT / Policy Decorator): the
replay buffer holds the base's action of every step as the base's own actor computes it (its chunks executed as
they would be alone), the next step's base action where the episode goes on and a fresh plan from the final
observation where it ended; the executed action is the base's corrected by the residual; the base never changes;
an interrupted run continues exactly; the run exports as the deployable per-step residual; what SAC cannot train
is refused naming the setting."""

from __future__ import annotations

import copy

import pytest
import torch
from rich.console import Console

from policyforge.algos.runner import RunConfig, Runner
from policyforge.config import ConfigError, from_dict
from policyforge.policies.residual import BASE_ACTION_KEY, ResidualPolicy
from policyforge.policies.rollout import ChunkedActor

SCALE = 0.5


def residual_run(base_run, out, **algo) -> dict:
    return {
        "name": "residual-sac", "out_dir": str(out), "init_policy": str(base_run),
        "sim": {"task": "arm-reach", "num_envs": 4},
        "policy": {"class": "residual", "per_step": True, "squash": True, "scale": SCALE, "init_std": 0.3,
                   "hidden": [16], "base": {"class": "flow", "chunk": {"n_obs_steps": 2, "horizon": 4, "act_steps": 2},
                                            "steps": 3, "denoiser": {"hidden": [32, 32]}}},
        "algo": {"class": "sac", "learning_starts": 16, "batch_size": 16, "steps_per_iteration": 4,
                 "critic_hidden": [16], "initial_actions": "policy", **algo},
        "runner": {"total_env_steps": 160, "eval_envs": 2, "video": "none", "eval_every_steps": 0,
                   "tensorboard": False},
    }  # fmt: skip


def test_the_replay_holds_the_bases_own_actions_and_the_residual_only_corrects_them(bc_flow_run, tmp_path):
    runner = Runner.start(from_dict(RunConfig, residual_run(bc_flow_run, tmp_path)), Console(quiet=True))
    policy = runner.algo.policy
    assert isinstance(policy, ResidualPolicy) and policy.per_step
    base = {k: v.clone() for k, v in policy.base.state_dict().items()}
    runner.train()
    algo = runner.algo
    assert runner.env_steps == 160 and algo.transitions == 160 and algo.updates > 0
    assert all(torch.equal(v, base[k]) for k, v in policy.base.state_dict().items())

    replay, n = algo.replay, algo.replay.size
    obs, next_obs = replay.data[f"obs/{BASE_ACTION_KEY}"][:n], replay.data[f"next_obs/{BASE_ACTION_KEY}"][:n]
    states = replay.data["obs/policy"][:n]
    assert (replay.data["action"][:n] - obs).abs().max() > 1e-3  # the residual explores around the base
    # per env, in step order: the base's own actor fed the same observations gives every stored base action
    actor = ChunkedActor(policy.base, 1)
    per_env = [range(env, n, 4) for env in range(4)]
    for rows in per_env:
        actor = ChunkedActor(policy.base, 1)
        for i, row in enumerate(rows):
            torch.testing.assert_close(actor({"policy": states[row : row + 1]})[0], obs[row])
            ended = bool(replay.data["terminated"][row]) or (i + 1 < len(rows) and not torch.equal(
                next_obs[row], obs[rows[i + 1]]))  # fmt: skip
            if ended:
                actor.episodes_ended(torch.ones(1, dtype=torch.bool))
    # where an episode goes on, the next observation's base action is the next step's
    continued = [(row, rows[i + 1]) for rows in per_env for i, row in enumerate(rows[:-1])
                 if torch.equal(replay.data["next_obs/policy"][row], states[rows[i + 1]])]  # fmt: skip
    assert len(continued) > 0.8 * n
    assert all(torch.equal(next_obs[a], obs[b]) for a, b in continued)
    runner.close()


@pytest.mark.parametrize("n_step", [1, 3])
def test_an_interrupted_residual_run_continues_exactly(bc_flow_run, tmp_path, n_step):
    """The actor's per-env inputs (the base's chunks in flight) and n-step transitions still pending are part of
    SAC's state: a run restored from its state mid-chunk takes the same steps and learns the same parameters as the
    run it was saved from."""
    config = from_dict(RunConfig, residual_run(bc_flow_run, tmp_path, steps_per_iteration=3, n_step=n_step))
    torch.manual_seed(0)
    whole = Runner.start(config, Console(quiet=True))
    for _ in range(3):
        whole.obs, _ = whole.algo.iterate(whole.env, whole.obs, lambda info: None)
    saved = copy.deepcopy((whole.algo.state_dict(), whole.env.get_state(), whole.obs))  # a checkpoint's copy
    rng = torch.get_rng_state()
    for _ in range(3):
        whole.obs, _ = whole.algo.iterate(whole.env, whole.obs, lambda info: None)
    config = residual_run(bc_flow_run, tmp_path, steps_per_iteration=3, n_step=n_step)
    config = from_dict(RunConfig, {**config, "name": "other"})
    restored = Runner.start(config, Console(quiet=True))
    restored.algo.load_state_dict(saved[0])
    restored.env.set_state(saved[1])
    torch.set_rng_state(rng)
    restored.obs = saved[2]
    for _ in range(3):
        restored.obs, _ = restored.algo.iterate(restored.env, restored.obs, lambda info: None)
    for name, value in whole.algo.policy.state_dict().items():
        assert torch.equal(value, restored.algo.policy.state_dict()[name]), name
    for name, values in whole.algo.replay.data.items():
        assert torch.equal(values, restored.algo.replay.data[name]), name
    assert ("discount" in whole.algo.replay.data) == (n_step > 1)
    whole.close()
    restored.close()


def test_the_actor_penalty_keeps_corrections_near_the_base(bc_flow_run, tmp_path):
    """The same run with and without `actor_penalty`: the penalised residual's corrections stay smaller."""
    sizes = []
    for penalty in (0.0, 10.0):
        config = residual_run(bc_flow_run, tmp_path / str(penalty), actor_penalty=penalty, actor_lr=1e-2,
                              updates_per_step=4)  # fmt: skip
        torch.manual_seed(0)
        runner = Runner.start(from_dict(RunConfig, config), Console(quiet=True))
        runner.train()
        replay = runner.algo.replay
        obs = {k: replay.data[f"obs/{k}"][: replay.size] for k in ("policy", BASE_ACTION_KEY)}
        with torch.no_grad():
            _, mean, _ = runner.algo.policy.distribution(obs)
        sizes.append(float(torch.tanh(mean).abs().mean()))
        runner.close()
    assert sizes[1] < 0.5 * sizes[0], sizes


def test_the_run_exports_as_its_per_step_residual_with_the_base_beside_it(bc_flow_run, tmp_path):
    from policyforge.policies.export import export_run
    from policyforge.policies.export_description import load_description

    runner = Runner.start(from_dict(RunConfig, residual_run(bc_flow_run, tmp_path)), Console(quiet=True))
    runner.train()
    runner.close()
    path, error, _ = export_run(tmp_path / "residual-sac", "onnx")
    assert error < 1e-4
    description = load_description(path)
    assert description["base"] == "policy_base.onnx" and (path.parent / "policy_base.onnx").is_file()
    assert description["residual_scale"] == SCALE


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"policy": {"class": "residual", "per_step": False}}, r"policy.per_step: SAC corrects each executed action"),
        ({"policy": {"class": "residual", "per_step": True}}, r"policy.squash: SAC's residual is bounded"),
        ({"algo": {"class": "sac", "initial_actions": "uniform"}}, r"algo.initial_actions: uniform random actions "),
        ({"policy": {"class": "flow"}}, r"policy.class: SAC trains Gaussian policies and per-step residuals"),
    ],
)
def test_what_sac_cannot_train_is_refused_naming_the_setting(bc_flow_run, tmp_path, change, message):
    config = residual_run(bc_flow_run, tmp_path)
    for section, values in change.items():
        config[section] = {**config[section], **values} if section == "algo" else values
    with pytest.raises(ConfigError, match=message):
        Runner.start(from_dict(RunConfig, config), Console(quiet=True))


def test_demonstrations_are_replayed_with_the_bases_actions_and_their_success_as_reward(bc_flow_run, tmp_path):
    """RLPD: the recorded episodes become transitions whose actor inputs are the base's own actions along them,
    rewards their success flags; every batch is half demonstrations."""
    from policyforge.data.dataset import Demonstrations
    from policyforge.data.layout import ACTION

    dataset = bc_flow_run.parent / "demos"
    config = residual_run(bc_flow_run, tmp_path, demonstrations=str(dataset))
    config["sim"]["task_options"] = {"reward_type": "sparse"}
    runner = Runner.start(from_dict(RunConfig, config), Console(quiet=True))
    algo, demos = runner.algo, Demonstrations(dataset)
    runner.train()
    bounds = demos.episode_bounds
    assert algo.demos.size == demos.num_frames - demos.num_episodes  # the last frame of each has no next one
    start, end = bounds[0]
    length = end - start - 1
    stored = {k: v[:length] for k, v in algo.demos.data.items()}
    states = torch.as_tensor(demos.column("observation.state")[start:end])
    actor = ChunkedActor(algo.policy.base, 1)
    expected = torch.cat([actor({"policy": states[t : t + 1]}) for t in range(end - start)])
    torch.testing.assert_close(stored[f"obs/{BASE_ACTION_KEY}"], expected[:-1])
    torch.testing.assert_close(stored[f"next_obs/{BASE_ACTION_KEY}"], expected[1:])
    torch.testing.assert_close(stored["action"], torch.as_tensor(demos.column(ACTION)[start : end - 1]))
    success = torch.as_tensor(demos.column("next.success")[start : end - 1].reshape(-1), dtype=torch.float32)
    assert torch.equal(stored["reward"], success) and success.sum() > 0
    batch = algo._batch()
    demo_rows = {tuple(row.tolist()) for row in algo.demos.data["action"][: algo.demos.size]}
    from_demos = sum(tuple(row.tolist()) in demo_rows for row in batch["action"])
    assert from_demos == algo.config.batch_size // 2
    runner.close()


def test_demonstrations_need_the_sparse_reward_and_an_actor_in_action_space(bc_flow_run, tmp_path):
    dataset = str(bc_flow_run.parent / "demos")
    with pytest.raises(ConfigError, match=r"algo.demonstrations: .*set sim.task_options.reward_type=sparse"):
        Runner.start(from_dict(RunConfig, residual_run(bc_flow_run, tmp_path, demonstrations=dataset)),
                     Console(quiet=True))  # fmt: skip
