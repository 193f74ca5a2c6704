"""Learning-curve figures read at a glance: the method named in the title, success on a fixed 0–100% axis, no
success panel for a task without a success flag, and a fine-tuning run's evaluation of its initial policy at step 0
(logged once, not again on --resume)."""

import json
from pathlib import Path

import pytest

from policyforge.algos import plots
from policyforge.algos.naming import method_name
from policyforge.algos.run_config import CONFIG_FILE, RunConfig
from policyforge.cli import main
from policyforge.config import load, save

RECIPES = sorted(path for path in Path("configs").glob("*.yaml") if path.name != "tour.yaml")
EXPECTED = {  # the end of a recipe's file name → its method's name
    "vla-bc": "BC (vla)",
    "vla-ppo": "ReinFlow (VLA)",
    "vla-ppo-flow": "ReinFlow",
    "vla-distill": "DAgger (gaussian student)",
    "vla-distill-wrist": "DAgger (flow student)",
    "sim2real-student": "DAgger (gaussian student)",
    "dppo": "DPPO",
    "reinflow": "ReinFlow",
    "flow-sde": "Flow-SDE",
    "residual-diffusion": "residual PPO (diffusion base)",
    "residual-flow": "residual PPO (flow base)",
    "residual-sac": "residual SAC (flow base)",
    "diffusion-bc": "BC (diffusion)",
    "flow-bc": "BC (flow)",
    "ppo-scratch": "PPO",
    "ppo": "PPO",
    "sac": "SAC",
    "dsrl": "DSRL (SAC in a base's noise)",
    "reward-model": "reward model",
    "ppo-learned-reward": "PPO on a learned reward",
    "dppo-learned-reward": "DPPO on a learned reward",
}


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda path: path.stem)
def test_every_recipe_names_its_method(recipe):
    suffix = next(key for key in sorted(EXPECTED, key=len, reverse=True) if recipe.stem.endswith(key))
    assert method_name(load(RunConfig, recipe)) == EXPECTED[suffix]


def test_other_combinations_name_algorithm_and_policy():
    config = load(RunConfig, "configs/arm-lift-cube-flow-bc.yaml", ["policy.variant=shortcut"])
    assert method_name(config) == "BC (shortcut flow)"
    config = load(RunConfig, "configs/pendulum-swingup-sac.yaml")
    assert method_name(config) == "SAC"
    config = load(RunConfig, "configs/vla-distill.yaml", ["algo.mode=rpd"])
    assert method_name(config) == "RPD (gaussian student)"


def _plot(monkeypatch, run_dir: Path):
    """The figure `plot_learning_curves(run_dir)` draws (captured as it is closed)."""
    figures = []
    monkeypatch.setattr(plots.plt, "close", figures.append)
    assert plots.plot_learning_curves(run_dir).is_file()
    assert len(figures) == 1
    return figures[0]


def _run_dir(tmp_path: Path, recipe: str, records: list[dict]) -> Path:
    run_dir = tmp_path / Path(recipe).stem
    run_dir.mkdir()
    save(load(RunConfig, recipe), run_dir / CONFIG_FILE)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run_dir


def _axis(figure, label: str):
    found = [axis for axis in figure.axes if axis.get_visible() and axis.get_ylabel() == label]
    return found[0] if found else None


def test_a_dppo_plot_is_titled_dppo_with_a_fixed_percent_success_axis(monkeypatch, tmp_path):
    records = [
        {"env_steps": 0, "eval/return": 50.0, "eval/success": 0.98, "eval/length": 100.0},
        {"env_steps": 1000, "train/return": 60.0, "train/success": 0.99, "train/length": 90.0, "perf/sps": 1e3},
        {"env_steps": 2000, "eval/return": 70.0, "eval/success": 1.0, "eval/length": 80.0},
    ]
    figure = _plot(monkeypatch, _run_dir(tmp_path, "configs/arm-lift-cube-dppo.yaml", records))
    assert figure._suptitle.get_text() == "arm-lift-cube · DPPO"
    success = _axis(figure, "success rate")
    assert success.get_ylim() == (0.0, 1.0)  # not zoomed into 0.98–1.00
    assert success.yaxis.get_major_formatter()(1.0, 0) == "100%"
    evaluation = next(line for line in success.get_lines() if line.get_label() == "eval/success")
    assert list(evaluation.get_xdata()) == [0, 2000], "the initial policy's evaluation is the first point"
    # step counts short enough not to run into each other (a 12M-step run printed 12000000 under every tick)
    assert success.xaxis.get_major_formatter()(400_000, 0) == "400k"
    assert success.xaxis.get_major_formatter()(12_000_000, 0) == "12M"


def test_a_task_without_success_has_no_success_panel(monkeypatch, tmp_path):
    records = [  # what a quadruped-walk run logs: training's success count is 0, evaluation has no success
        {"env_steps": 1000, "train/return": 5.0, "train/success": 0.0, "train/length": 900.0, "perf/sps": 1e4},
        {"env_steps": 2000, "eval/return": 9.0, "eval/length": 1000.0},
    ]
    figure = _plot(monkeypatch, _run_dir(tmp_path, "configs/quadruped-walk-ppo.yaml", records))
    assert _axis(figure, "success rate") is None
    assert _axis(figure, "return") is not None and _axis(figure, "episode length") is not None
    assert figure._suptitle.get_text() == "quadruped-walk · PPO"


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_finetuning_run_evaluates_its_initial_policy_at_step_0_once(finished_run, tiny_run_args, tmp_path):
    args = ["train", *tiny_run_args, f"out_dir={tmp_path}", "name=finetune", f"init_policy={finished_run}"]
    assert main(args) == 0
    run_dir = tmp_path / "finetune"
    first = _records(run_dir)[0]
    assert first["env_steps"] == 0 and "eval/return" in first and "eval/success" in first
    assert not any(r["env_steps"] == 0 for r in _records(finished_run)), "a run from scratch has no step-0 point"
    assert main(["train", "--resume", str(run_dir), "runner.total_env_steps=1536"]) == 0
    records = _records(run_dir)
    assert [r["env_steps"] for r in records if "eval/return" in r].count(0) == 1, "not repeated on --resume"
    assert records[-1]["env_steps"] == 1536
