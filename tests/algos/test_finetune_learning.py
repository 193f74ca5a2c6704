"""Each fine-tuning method raises a weak behaviour-cloned start on an easy task, within a small budget.

The weak start: flow and diffusion policies cloned from hesitant demonstrations of arm-reach (the expert pauses
30% of the time), evaluated on episodes of 1.2 s, too short for a hesitant arm. PPO on the dense reward teaches
them to move without pausing; the return (and mostly the success) rises. The residual (which PPO trains alone,
whatever the base) is shown on a weak Gaussian base. The full-size comparison, residuals on diffusion and flow
bases included, on the sparse-reward cube tasks is policyforge/bench/finetune_table.py.
"""

import pytest
from rich.console import Console

from policyforge.algos.runner import RunConfig, Runner
from policyforge.config import from_dict
from policyforge.data.collect import collect

pytestmark = pytest.mark.slow

CHUNK = {"n_obs_steps": 2, "horizon": 4, "act_steps": 2}
DENOISER = {"hidden": [128, 128]}
DIFFUSION = {"chunk": CHUNK, "inference_steps": 4, "denoiser": DENOISER}
BASES = {
    "flow": {"policy": {"class": "flow", "chunk": CHUNK, "steps": 4, "denoiser": DENOISER}},
    "diffusion": {"policy": {"class": "diffusion", **DIFFUSION}},
}
TASK_OPTIONS = {"episode_seconds": 1.2}
QUIET = {"eval_envs": 64, "video": "none", "eval_every_steps": 0, "tensorboard": False}
METHODS = {  # base, settings on top of it, required return gain
    "dppo": ("diffusion", {"algo": {"trainable_steps": 2, "ratio": "per_step", "denoising_discount": 0.99,
                                   "clip_ratio": 0.01, "clip_ratio_first": 0.001, "log_prob_clamp": [-5.0, 2.0]}}),
    "reinflow": ("flow", {"policy": {"chain_noise": "reinflow"}, "algo": {"entropy_coef": 0.001}}),
    "flow_sde": ("flow", {"policy": {"chain_noise": "sde"}}),
}  # fmt: skip


@pytest.fixture(scope="module")
def weak_starts(tmp_path_factory):
    """BC runs of both bases on hesitant demonstrations: {base: run directory}."""
    out = tmp_path_factory.mktemp("weak")
    demos = out / "demos"
    collect("arm-reach", 16, demos, num_envs=16, seed=0, action_noise=0.1, hesitation=0.3, progress=False)
    runs = {}
    for base, settings in BASES.items():
        config = {
            "name": f"bc-{base}",
            "out_dir": str(out),
            "sim": {"task": "arm-reach", "num_envs": 1, "task_options": TASK_OPTIONS},
            "algo": {
                "class": "bc",
                "dataset": str(demos),
                "gradient_steps": 300,
                "steps_per_iteration": 300,
                "warmup_steps": 20,
            },
            "runner": QUIET,
            **settings,
        }
        runner = Runner.start(from_dict(RunConfig, config), Console(quiet=True))
        runner.train()
        runner.close()
        runs[base] = out / f"bc-{base}"
    return runs


def merge(settings: dict, extra: dict) -> dict:
    return {k: {**settings.get(k, {}), **v} if isinstance(v, dict) else v for k, v in extra.items()} | {
        k: v for k, v in settings.items() if k not in extra
    }


@pytest.mark.parametrize("method", list(METHODS))
def test_fine_tuning_raises_a_weak_start(tmp_path, weak_starts, method):
    base, extra = METHODS[method]
    settings = {
        "name": method,
        "out_dir": str(tmp_path),
        "init_policy": str(weak_starts[base]),
        "sim": {"task": "arm-reach", "num_envs": 16, "task_options": TASK_OPTIONS},
        "algo": {"rollout_steps": 16, "actor_lr": 3e-5, "critic_warmup_iterations": 3},
        "runner": {**QUIET, "total_env_steps": 49152},
        **BASES[base],
    }
    runner = Runner.start(from_dict(RunConfig, merge(settings, extra)), Console(quiet=True))
    before = runner.evaluate()
    after = runner.train()
    runner.close()
    assert after["eval/return"] > before["eval/return"] + 1.5, (before, after)


@pytest.mark.parametrize("per_step", [False, True])
def test_residual_raises_a_weak_base(tmp_path, per_step):
    """ResiP on a weak base (a Gaussian PPO policy stopped early on arm-reach, ~10% success): PPO trains only
    the residual, base + 0.5 · residual, and success rises — also with the base's actions fed in per step
    (`residual.BaseActionHistory`, the path per-step residuals on chunked bases take)."""
    quiet = {**QUIET, "total_env_steps": 12288}
    gaussian = {"policy": {"class": "gaussian", "hidden": [64, 64], "init_std": 1.0}}
    settings = {"out_dir": str(tmp_path), "sim": {"task": "arm-reach", "num_envs": 16}, **gaussian}
    ppo = {"rollout_steps": 32, "actor_lr": 1e-3, "critic_lr": 1e-3}
    base_config = from_dict(RunConfig, {**settings, "name": "base", "algo": ppo, "runner": quiet})
    base = Runner.start(base_config, Console(quiet=True))
    base.train()
    base.close()
    residual = {
        **settings,
        "name": "residual",
        "init_policy": str(tmp_path / "base"),
        "policy": {
            "class": "residual",
            "base": gaussian["policy"],
            "scale": 0.5,
            "hidden": [64, 64],
            "per_step": per_step,
        },
        "algo": {**ppo, "actor_lr": 3e-4, "critic_warmup_iterations": 2},
        "runner": {**QUIET, "total_env_steps": 49152},
    }
    runner = Runner.start(from_dict(RunConfig, residual), Console(quiet=True))
    before = runner.evaluate()
    after = runner.train()
    runner.close()
    assert before["eval/success"] < 0.3 and after["eval/success"] > before["eval/success"] + 0.3, (before, after)
