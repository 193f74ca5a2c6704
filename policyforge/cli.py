"""The `policyforge` command line.

policyforge demo [key=value ...]                      train the demo recipe; checkpoint, plots, video
policyforge train CONFIG.yaml [key=value ...]         train a recipe
policyforge train --resume RUN_DIR                    continue a run from its latest checkpoint
policyforge eval RUN_DIR [--video]                    evaluate a run's policy (--checkpoint latest|best|N|FILE;
                                                      --instructions SET: held-out instructions)
policyforge export RUN_DIR --format onnx|torchscript  export the policy (normaliser inside), checked
policyforge bench NAME [args ...]                     run a benchmark (policyforge/bench/NAME.py)
policyforge config show RECIPE [key=value ...]        a recipe's resolved config, every field's docstring above it
policyforge envs                                      list the tasks
policyforge tour [key=value ...]                      scripted controllers on every task, with videos
policyforge collect TASK --episodes N [options]       scripted-expert demonstrations → LeRobot v3.0 dataset
policyforge deploy RUN_DIR|POLICY [--robot go2|franka] [--peer sim]  a policy on a robot through the safety filter
policyforge play RUN_DIR [--episodes N] [--out FILE.mp4]  watch the policy: MuJoCo viewer, or a video headless
policyforge sysid record --out REC.npz [--peer sim]    a hanging Go2's joints under an excitation (--hanging)
policyforge sysid fit REC.npz                          fit the simulated Go2's joints to it (CMA-ES)
policyforge data show DATASET [--episode K]         a dataset's summary and episodes (--video: film one)

Exit status: 0 done; 2 a user error (the message names the flag, field or file); 3 `deploy` ended in an e-stop
(its cause is printed); 4 `deploy --expect-reach` did not reach its goal; 130 Ctrl-C (training saves a checkpoint
first and prints the resume command); 1 anything else (a traceback).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import runpy
import sys
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from policyforge.algos import distill_command
from policyforge.algos.interrupt import INTERRUPT_EXIT
from policyforge.config import ConfigError, load
from policyforge.config_docs import commented
from policyforge.errors import DISK_FULL, UserError
from policyforge.real_robot import deploy_cli, sysid_cli
from policyforge.real_robot.deploy_cli import ESTOP_EXIT, NOT_REACHED_EXIT

__all__ = ["ESTOP_EXIT", "NOT_REACHED_EXIT", "main"]

SOURCE_ROOT = Path(__file__).resolve().parents[1]
DEMO_RECIPE = "arm-reach-ppo.yaml"


def find_recipe(name: str) -> Path:
    """A recipe by path, or by name (`.yaml` optional) in ./configs or the source checkout's configs/."""
    names = (name, f"{name}.yaml") if not name.endswith((".yaml", ".yml")) else (name,)
    for candidate in (Path(n) for n in names):
        for place in (candidate, Path("configs") / candidate, SOURCE_ROOT / "configs" / candidate):
            if place.is_file():
                return place
    known = sorted({p.stem for folder in (Path("configs"), SOURCE_ROOT / "configs") for p in folder.glob("*.yaml")})
    raise ConfigError(
        "config", f"no recipe {name!r}; give a YAML path or the name of a recipe in configs/: {', '.join(known)}"
    )


def _config_show(args: argparse.Namespace, console: Console) -> None:
    from policyforge.algos.runner import RunConfig

    config = load(RunConfig, find_recipe(args.recipe), args.overrides)
    print(commented(config), end="")  # plain text, not rich: YAML that loads again, brackets and all


def _train(args: argparse.Namespace, console: Console) -> None:
    from policyforge.algos.runner import RunConfig, Runner

    if args.resume:
        overrides = [a for a in (args.config, *args.overrides) if a]
        runner = Runner.resume(Path(args.resume), console, overrides)
        console.print(f"resuming {args.resume} at {runner.env_steps:,} {runner.algo.step_unit.replace('_', ' ')}")
    else:
        if not args.config:
            raise ConfigError(
                "config", "give a recipe (policyforge train configs/<task>-<algo>.yaml) or --resume RUN_DIR"
            )
        config = load(RunConfig, find_recipe(args.config), args.overrides)
        runner = Runner.start(config, console)
        console.print(f"run directory: {runner.run_dir}")
    _report(console, runner.train(), runner.run_dir)
    runner.close()


def _demo(args: argparse.Namespace, console: Console) -> None:
    from policyforge.algos import run_files
    from policyforge.algos.runner import RunConfig, Runner

    config = load(RunConfig, find_recipe(DEMO_RECIPE), ["name=demo", *args.overrides])
    lock = run_files.reclaim(config.run_dir, "demo")  # starts afresh, deleting only a previous demo run's files
    runner = Runner.start(config, console, "demo", lock)
    console.print(
        f"[bold]policyforge demo[/bold]: PPO on {config.sim.task}, {config.sim.num_envs} envs, "
        f"{config.runner.total_env_steps:,} steps → {runner.run_dir}"
    )
    _report(console, runner.train(), runner.run_dir)
    runner.close()


def _report(console: Console, summary: dict, run_dir: Path) -> None:
    table = Table(title=f"finished: {run_dir}")
    table.add_column("result")
    table.add_column("value")
    keys = ["gradient_steps" if "gradient_steps" in summary else "env_steps", "wall_s", "eval/return", "eval/success"]
    keys.append("eval/length")
    keys += [key for key in summary if key.startswith("eval/") and "eval/return" not in summary]  # a reward model's
    if summary.get("compile_s"):
        keys.insert(2, "compile_s")
    for key in (key for key in keys if key in summary):  # eval/success: only for tasks with a success flag
        value = summary[key]
        table.add_row(
            key,
            f"{value:.0%}" if key == "eval/success" else f"{value:,.4g}" if isinstance(value, float) else f"{value:,}",
        )
    videos = sorted((run_dir / "videos").glob("*.mp4"))
    for key, value in (
        ("checkpoint", summary["checkpoint"]),
        ("best checkpoint", summary.get("best_checkpoint", "-")),
        ("plot", summary["plot"]),
        ("video", videos[-1] if videos else "-"),
    ):
        table.add_row(key, str(value))
    console.print(table)


def _eval(args: argparse.Namespace, console: Console) -> None:
    from policyforge.algos import checkpoint
    from policyforge.algos.evaluate import evaluate
    from policyforge.algos.progress import best_line, metric_text
    from policyforge.algos.runner import EVAL_SEED_OFFSET, load_run
    from policyforge.sims.config import MAX_ENVS

    if args.envs is not None and not 1 <= args.envs <= MAX_ENVS:
        raise ConfigError("--envs", f"must be in [1, {MAX_ENVS}] (evaluation episodes, one per env), got {args.envs}")
    options = {"instructions": args.instructions} if args.instructions else None
    config, policy, env = load_run(Path(args.run_dir), args.checkpoint, args.envs, args.backend, options)
    if args.instructions:
        console.print(f"instructions: the set {args.instructions!r} (sim.task_options.instructions)")
    if args.checkpoint == "best":  # which evaluation it was, as training recorded it
        console.print(best_line(checkpoint.read(checkpoint.resolve(Path(args.run_dir), "best"))["best"]))
    video = Path(args.run_dir) / "videos" / "eval_cli.mp4" if args.video else None
    metrics = evaluate(policy, env, config.seed + EVAL_SEED_OFFSET, video, config.runner.video_camera)
    env.close()
    for key, value in metrics.items():
        console.print(f"{key}: {metric_text(key, value)}")
    if video:
        console.print(f"video: {video}")


def _export(args: argparse.Namespace, console: Console) -> None:
    from policyforge.policies.export import export_run
    from policyforge.policies.export_description import description_path

    out, error, origin = export_run(Path(args.run_dir), args.format, args.out, args.checkpoint)
    console.print(
        f"exported {args.format}: {out} (+ {description_path(out).name}) from {origin}; "
        f"max |exported − act| = {error:.2e}"
    )


def benchmarks() -> list[str]:
    """The modules of `policyforge.bench` (installed with the package), by module name."""
    from policyforge import bench

    return sorted(module.name for module in pkgutil.iter_modules(bench.__path__) if not module.name.startswith("_"))


def _bench(args: argparse.Namespace, console: Console) -> None:
    module = args.name.replace("-", "_")
    if module not in benchmarks():  # a name, never a path: only the modules of policyforge.bench run
        names = [name.replace("_", "-") for name in benchmarks()]
        raise ConfigError("bench", f"no benchmark {args.name!r} in policyforge/bench/; available: {names}")
    sys.argv = [module, *args.args]  # run_module sets argv[0] to the file
    runpy.run_module(f"policyforge.bench.{module}", run_name="__main__", alter_sys=True)


def _envs(args: argparse.Namespace, console: Console) -> None:
    from policyforge.sims import TASKS, SimConfig, make_env

    table = Table(title="policyforge tasks (plus gym:<id> for any installed gymnasium env)")
    for column in ("task", "actions", "policy obs", "critic obs", "control", "episode", "what"):
        table.add_column(column, overflow="fold")
    table.columns[0].no_wrap, table.columns[0].min_width = True, max(map(len, TASKS))  # names whole at any width
    for name, cls in TASKS.items():
        env = make_env(SimConfig(task=name, num_envs=1))
        task = env.task
        row = [task.action_dim, env.obs_shapes["policy"][0], env.obs_shapes["critic"][0]]
        timing = [f"{1 / task.config.control_dt:.0f} Hz", f"{task.episode_steps} steps"]
        table.add_row(name, *map(str, row), *timing, (cls.__doc__ or "").split("\n")[0])
        env.close()
    console.print(table)


def _tour(args: argparse.Namespace, console: Console) -> None:
    from policyforge.tour import TourConfig, run_tour

    run_tour(load(TourConfig, args.config, args.overrides), console)


INSTRUCTION_SETS = ("train", "heldout_paraphrase", "heldout_combination", "all")
"""`eval --instructions`: the instruction sets of arm-instructed (`sims.tasks.instructions.InstructionSet`, not
imported here: the command line starts without the simulators)."""


def _library(command: str) -> Callable[[argparse.Namespace, Console], int | None]:
    """A command whose code is in a library module ("module:function(args, console)"), imported when it runs."""
    module, function = command.split(":")
    return lambda args, console: getattr(importlib.import_module(module), function)(args, console)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="policyforge", description="Robot learning in parallel simulation.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="train the demo recipe (PPO, arm-reach): checkpoint, plots, video")
    demo.add_argument("overrides", nargs="*", help="key=value overrides, e.g. runner.total_env_steps=200000")
    demo.set_defaults(run=_demo)
    train = commands.add_parser("train", help="train a recipe, or resume a run")
    train.add_argument("config", nargs="?", help="recipe YAML (configs/<task>-<algo>.yaml)")
    train.add_argument("overrides", nargs="*", help="key=value overrides, e.g. sim.num_envs=128")
    train.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue this run from its latest checkpoint (runner.* overrides allowed, e.g. a longer "
        "runner.total_env_steps)",
    )
    train.set_defaults(run=_train)
    evaluation = commands.add_parser("eval", help="evaluate a run's policy deterministically")
    evaluation.add_argument("run_dir")
    evaluation.add_argument("--video", action="store_true", help="film the evaluation (videos/eval_cli.mp4)")
    evaluation.add_argument(
        "--envs", type=int, default=None, help="evaluation episodes, one per env (default: the run's runner.eval_envs)"
    )
    evaluation.add_argument(
        "--checkpoint",
        default=None,
        help="latest (default), best (the run's best evaluation), N (the checkpoint at N steps, as logged), or a file",
    )
    evaluation.add_argument(
        "--backend", choices=["mujoco", "mjx"], default=None, help="simulate on this backend (sim-to-sim check)"
    )
    evaluation.add_argument(
        "--instructions",
        choices=INSTRUCTION_SETS,
        default=None,
        help="instructed tasks: the instruction set to evaluate on (default: the run's sim.task_options.instructions)",
    )
    evaluation.set_defaults(run=_eval)
    exporting = commands.add_parser("export", help="export a run's policy to ONNX or TorchScript")
    exporting.add_argument("run_dir")
    exporting.add_argument("--format", choices=["onnx", "torchscript"], required=True)
    exporting.add_argument(
        "--out", default=None, help="output file (default: RUN_DIR/export/policy.onnx|.pt), described in FILE.json"
    )
    exporting.add_argument(
        "--checkpoint", default=None, help="latest (default), best, N (the checkpoint at N steps, as logged) or a file"
    )
    exporting.set_defaults(run=_export)
    bench = commands.add_parser("bench", help="run a benchmark of policyforge/bench/ (e.g. env-throughput)")
    bench.add_argument("name")
    bench.add_argument("args", nargs=argparse.REMAINDER)
    bench.set_defaults(run=_bench)
    configs = commands.add_parser("config", help="inspect recipes").add_subparsers(dest="config_command", required=True)
    show = configs.add_parser("show", help="a recipe's resolved config as YAML, every field's docstring above it")
    show.add_argument("recipe", help="a recipe in configs/ by name (e.g. arm-reach-ppo) or a YAML file")
    show.add_argument("overrides", nargs="*", help="key=value overrides, as train takes them")
    show.set_defaults(run=_config_show)
    commands.add_parser("envs", help="list the tasks").set_defaults(run=_envs)
    tour = commands.add_parser("tour", help="scripted controllers on every task, with videos")
    tour.add_argument("--config", default=None, help="YAML file of TourConfig fields (configs/tour.yaml)")
    tour.add_argument("overrides", nargs="*", help="key=value overrides, e.g. num_envs=32")
    tour.set_defaults(run=_tour)
    collecting = commands.add_parser(
        "collect",
        help="record scripted-expert demonstrations as a LeRobot v3.0 dataset (appends to a compatible one)",
    )
    collecting.add_argument(
        "task", help="an arm task with a scripted expert (arm-reach, arm-push-cube, arm-lift-cube); any with --policy"
    )
    collecting.add_argument(
        "options", nargs="*", help="task options key=value, right after the task, e.g. episode_seconds=8"
    )
    collecting.add_argument("--episodes", type=int, required=True, help="episodes to write")
    collecting.add_argument("--out", default=None, help="dataset directory (default: data/<task>)")
    collecting.add_argument("--envs", type=int, default=16, help="parallel environments")
    collecting.add_argument("--seed", type=int, default=0, help="env seed (appending adds the episodes present)")
    collecting.add_argument("--noise", type=float, default=0.0, help="std of Gaussian noise on the expert's actions")
    collecting.add_argument(
        "--noise-correlation",
        type=float,
        default=0.0,
        help="correlation of the noise from step to step, [0, 1): near 1 the arm wanders (play-like rollouts)",
    )
    collecting.add_argument("--hesitation", type=float, default=0.0, help="per-step probability of a 2-6 step pause")
    collecting.add_argument("--cameras", default="", help="cameras to record as videos, e.g. front,wrist")
    collecting.add_argument("--image-size", default="96", help="camera image size: SIZE or WIDTHxHEIGHT (default 96)")
    collecting.add_argument(
        "--image-quality",
        choices=["fast", "full"],
        default="fast",
        help="fast (default): no shadows, as training's sim.image.quality fast renders; full: as videos are drawn",
    )
    collecting.add_argument("--only-successful", action="store_true", help="keep successful episodes only")
    collecting.add_argument("--overwrite", action="store_true", help="delete an existing dataset in --out first")
    collecting.add_argument(
        "--policy", default=None, help="a training run directory whose policy demonstrates (e.g. a PPO expert)"
    )
    collecting.set_defaults(run=_library("policyforge.data.collect_cli:command"))
    deploy_cli.add_parser(commands)
    sysid_cli.add_parser(commands)
    distill_command.add_parser(commands)
    playing = commands.add_parser("play", help="watch a run's policy: the MuJoCo viewer with a display, else a video")
    playing.add_argument("run_dir")
    playing.add_argument(
        "--checkpoint", default=None, help="latest (default), best, N (the checkpoint at N steps, as logged) or a file"
    )
    playing.add_argument("--episodes", type=int, default=3, help="episodes to play, one after another")
    playing.add_argument("--out", default=None, help="render to this MP4 (headless default: RUN_DIR/videos/play.mp4)")
    playing.set_defaults(run=_library("policyforge.play:command"))
    data = commands.add_parser("data", help="inspect datasets").add_subparsers(dest="data_command", required=True)
    showing = data.add_parser("show", help="a LeRobot dataset: summary, features, per-episode outcomes, a video")
    showing.add_argument("dataset", help="the dataset directory (the one holding meta/info.json)")
    showing.add_argument("--episode", type=int, default=None, help="show episode K only (numbered from 0)")
    showing.add_argument("--video", default=None, help="write the episode's camera images to this MP4")
    showing.set_defaults(run=_library("policyforge.data.show:command"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    console = Console()
    try:
        return args.run(args, console) or 0  # a command's own exit status (deploy: e-stop, goal not reached)
    except KeyboardInterrupt as err:  # training's TrainingInterrupted says what it saved and how to resume
        console.print(str(err) or "interrupted (Ctrl-C)", markup=False, highlight=False, soft_wrap=True)
        return INTERRUPT_EXIT
    except (UserError, FileExistsError, FileNotFoundError) as err:
        console.print(f"[red]error[/red] {err}")
        return 2
    except OSError as err:
        if err.errno not in DISK_FULL:
            raise
        console.print(
            f"[red]error[/red] writing {err.filename or 'a file'} failed ({err.strerror}): the disk is full or a "
            "file-size limit was reached. policyforge writes its files atomically, so what was complete before is "
            "intact: free space (or lift the limit) and run the command again (a training run: train --resume RUN)"
        )
        return 2


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line; `key=value` overrides of commands that take them may also follow the options."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra and hasattr(args, "overrides") and all("=" in a and not a.startswith("-") for a in extra):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


if __name__ == "__main__":
    sys.exit(main())
