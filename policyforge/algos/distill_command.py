"""`policyforge distill TEACHER_RUN [key=value ...] [--task FAMILY] [--mode rpd|dagger|bc]`: a compact expert from
a trained run (a multi-task VLA, a privileged PPO run), trained with `algo: distill` on the teacher's own simulation
settings (cameras, image size, instruction set; `--task` keeps one instruction family), then evaluated side by side
with its teacher on the same episodes, a video of each and both policies' batch-1 decision latency.

The student and the algorithm's settings come from a recipe (default `vla-distill`: configs/vla-distill.yaml);
`key=value` overrides apply last. The student's run directory gets `compare.json` and `videos/{teacher,student}.mp4`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from policyforge import config as config_io
from policyforge.config import ConfigError

RECIPE = "vla-distill"


def distill_config(teacher_run: Path, family: str | None, mode: str | None, recipe: Path, overrides: list[str]):
    """The student's run config: the recipe, the teacher's `sim` section (with the recipe's task options, e.g. its
    reward, when both name the same task; one family with `family`; the recipe's `image.render`), the teacher, then
    `overrides`."""
    from policyforge.algos.run_config import CONFIG_FILE, RunConfig

    if not (teacher_run / CONFIG_FILE).is_file():
        raise ConfigError("teacher", f"{teacher_run} is not a policyforge run (no {CONFIG_FILE}); give a run directory")
    teacher = config_io.load(RunConfig, teacher_run / CONFIG_FILE)
    data = config_io.read_yaml(recipe)
    sim, recipe_sim = config_io.to_dict(teacher.sim), data.get("sim", {})
    if recipe_sim.get("task", sim["task"]) == sim["task"]:  # the recipe's reward settings, on the teacher's task
        sim["task_options"] = {**sim["task_options"], **recipe_sim.get("task_options", {})}
    if family is not None:
        if "families" not in sim["task_options"] and teacher.sim.task != "arm-instructed":
            raise ConfigError("--task", f"the teacher's task {teacher.sim.task} has no instruction families")
        sim["task_options"] = {**sim["task_options"], "families": [family]}
    sim["num_envs"] = recipe_sim.get("num_envs", sim["num_envs"])
    if "render" in recipe_sim.get("image", {}):  # the teacher's cameras, rendered when the recipe says
        sim["image"]["render"] = recipe_sim["image"]["render"]
    algo = {**data.get("algo", {}), "teacher": str(teacher_run)}
    if mode is not None:
        algo["mode"] = mode
    name = f"{teacher_run.name}-{family or 'all'}-{algo.get('mode', 'dagger')}"
    if recipe.stem != RECIPE:  # another student: vla-distill-wrist → ...-dagger-wrist
        name += f"-{recipe.stem.removeprefix(RECIPE + '-')}"
    data.update({"sim": sim, "algo": algo, "name": data.get("name") or name})
    return config_io.from_dict(RunConfig, config_io.apply_overrides(data, overrides))


def decision_ms(policy, obs: dict[str, Any], calls: int = 200) -> float:
    """Median wall time of one `act` on a batch of one env's observation, ms."""
    import torch

    from policyforge.bench.policy_latency import timings_ms

    one = {k: v[:1] for k, v in obs.items() if k in policy.obs_keys}
    with torch.no_grad():
        return timings_ms(lambda: policy.act(one), calls)[0]


def evaluate_run(
    run: Path,
    which: str,
    envs: int,
    family: str | None,
    seed: int,
    video: Path | None = None,
    camera: str | None = None,
) -> dict[str, Any]:
    """A run's policy (checkpoint `which`) on the first episodes of `envs` envs of `family` (every family: None),
    seeded as a run of `seed` evaluates, filmed to `video`; with its batch-1 decision time (`decision_ms`)."""
    from policyforge.algos.evaluate import evaluate
    from policyforge.algos.runner import EVAL_SEED_OFFSET, load_run

    options = {"families": [family]} if family else None
    _, policy, env = load_run(run, which, envs, task_options=options)
    metrics = evaluate(policy, env, seed + EVAL_SEED_OFFSET, video, camera)
    metrics["decision_ms"] = decision_ms(policy, env.reset(seed=seed))
    env.close()
    return metrics


def compare(student_run: Path, teacher_run: Path, teacher_checkpoint: str, family: str | None) -> dict[str, Any]:
    """Teacher and student evaluated on the same episodes (the student run's evaluation seeds and size), filmed,
    and timed at batch 1: {"teacher": {...}, "student": {...}}."""
    from policyforge.algos.run_config import CONFIG_FILE, RunConfig

    config = config_io.load(RunConfig, student_run / CONFIG_FILE)
    results = {}
    for role, run, which in (("teacher", teacher_run, teacher_checkpoint), ("student", student_run, "best")):
        video = student_run / "videos" / f"{role}.mp4"
        envs, camera = config.runner.eval_envs, config.runner.video_camera
        results[role] = evaluate_run(run, which, envs, family, config.seed, video, camera) | {"video": str(video)}
    return results


def print_comparison(console: Console, results: dict[str, Any]) -> None:
    table = Table(title="teacher and student on the same episodes")
    for column in ("policy", "success", "return", "decision at batch 1", "video"):
        table.add_column(column)
    for role, metrics in results.items():
        success = metrics.get("eval/success")
        table.add_row(
            role,
            "-" if success is None else f"{success:.0%}",
            f"{metrics['eval/return']:.1f}",
            f"{metrics['decision_ms']:.2f} ms",
            metrics["video"],
        )
    console.print(table)
    ratio = results["teacher"]["decision_ms"] / results["student"]["decision_ms"]
    console.print(f"the student decides {ratio:.0f}× faster than its teacher at batch 1")


def run(args: argparse.Namespace, console: Console) -> None:
    from policyforge.algos.runner import Runner
    from policyforge.cli import find_recipe
    from policyforge.io import write_json

    teacher = Path(args.teacher)
    config = distill_config(teacher, args.task, args.mode, find_recipe(args.recipe), args.overrides)
    runner = Runner.start(config, console)
    console.print(f"run directory: {runner.run_dir} (teacher {teacher}, mode {config.algo.mode})")
    runner.train()
    runner.close()
    results = compare(runner.run_dir, teacher, config.algo.teacher_checkpoint, args.task)
    write_json(runner.run_dir / "compare.json", results)
    print_comparison(console, results)


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("distill", help="distil a trained run (a VLA, a privileged policy) into a student")
    parser.add_argument("teacher", help="the teacher's run directory")
    parser.add_argument("--task", default=None, help="one instruction family of the teacher's task (lift, push, ...)")
    parser.add_argument("--mode", choices=("rpd", "dagger", "bc"), default=None, help="default: the recipe's")
    parser.add_argument("--recipe", default=RECIPE, help=f"the student's and algorithm's settings (default {RECIPE})")
    parser.add_argument("overrides", nargs="*", help="key=value settings applied last (e.g. runner.total_env_steps=…)")
    parser.set_defaults(run=run)
