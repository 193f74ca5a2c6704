"""`policyforge` command line: `envs` lists the tasks, `demo` runs the environment demo."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table

from policyforge.config import ConfigError, load


def _envs(args: argparse.Namespace, console: Console) -> None:
    from policyforge.sims import TASKS, make_task

    table = Table(title="policyforge tasks (plus gym:<id> for any installed gymnasium env)")
    for column in ("task", "actions", "policy obs", "critic obs", "control", "episode", "what"):
        table.add_column(column)
    from policyforge.sims import SimConfig, make_env

    for name, cls in TASKS.items():
        task = make_task(name)
        env = make_env(SimConfig(task=name, num_envs=1))
        table.add_row(
            name,
            str(task.action_dim),
            str(env.obs_shapes["policy"][0]),
            str(env.obs_shapes["critic"][0]),
            f"{1 / task.config.control_dt:.0f} Hz",
            f"{task.episode_steps} steps",
            (cls.__doc__ or "").split("\n")[0],
        )
    console.print(table)


def _demo(args: argparse.Namespace, console: Console) -> None:
    from policyforge.demo import DemoConfig, run_demo

    run_demo(load(DemoConfig, args.config, args.overrides), console)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="policyforge", description="Robot learning in parallel simulation.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("envs", help="list the tasks").set_defaults(run=_envs)
    demo = commands.add_parser("demo", help="run every task on the native MuJoCo backend and write videos")
    demo.add_argument("--config", default=None, help="YAML file of DemoConfig fields")
    demo.add_argument("overrides", nargs="*", help="key=value overrides, e.g. num_envs=32")
    demo.set_defaults(run=_demo)
    args = parser.parse_args(argv)
    console = Console()
    try:
        args.run(args, console)
    except ConfigError as err:
        console.print(f"[red]config error[/red] {err}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
