"""Hostile and careless input, automatically: bad configs and CLI arguments, corrupted checkpoints, metrics and
datasets, SIGKILL loops, a full disk (a file-size limit), two resumes at once, path attacks, malicious
checkpoints, and hostile policies and observations on deploy against the simulated Go2.

Each probe runs the `policyforge` CLI as a user would — a subprocess of the tree under test (PYTHONPATH), in a
fresh temporary working directory, with a time limit — then checks the files it left, and is classified
(robustness_kit.py says how): clear_error, held, traceback, silent, data_loss or code_execution. Expensive
fixtures (a tiny finished PPO run, a longer reference run, a small dataset, a tiny quadruped run with its export)
are built once and copied into each probe's directory.

    policyforge bench robustness [--only SUBSTRING] [--jobs 2] [--keep] [--tree PATH]

Prints a table; the last line is JSON {"probes", "clear_or_held", "bad", "data_loss", "code_execution"}, where
bad = traceback + silent + data_loss + code_execution.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import re
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from policyforge.bench.robustness_deploy import PROBES as DEPLOY_PROBES
from policyforge.bench.robustness_faults import LONG_RUN, REACH
from policyforge.bench.robustness_faults import PROBES as FAULT_PROBES
from policyforge.bench.robustness_kit import GOOD, Ctx, Probe, Run, Verdict, worst
from policyforge.bench.robustness_probes import PROBES as INPUT_PROBES
from policyforge.bench.robustness_probes import recipe
from policyforge.bench.robustness_runs import PROBES as RUN_PROBES

CHECKOUT = Path(__file__).resolve().parents[2]
"""The source checkout this file lies in (an installed package has no configs/ there: give --tree)."""

PROBES: list[Probe] = [*INPUT_PROBES, *RUN_PROBES, *FAULT_PROBES, *DEPLOY_PROBES]
TINY_RUN = ["sim.num_envs=8", "algo.rollout_steps=16", "algo.epochs=2", "runner.total_env_steps=1024",
            "runner.checkpoint_every=3", "runner.eval_envs=2", "runner.video=none", "runner.tensorboard=false",
            "out_dir=runs"]  # fmt: skip
"""tests/algos/conftest.py's TINY_RUN: 8 iterations of 128 env steps, checkpoints at iterations 3, 6 and 8."""
QUAD_RUN = ["sim.num_envs=4", "algo.rollout_steps=8", "algo.epochs=1", "runner.total_env_steps=64",
            "runner.checkpoint_every=1", "runner.eval_envs=1", "runner.video=none", "runner.tensorboard=false",
            "out_dir=runs"]  # fmt: skip


def _build_run(ctx: Ctx) -> tuple[list[Run], Path]:
    return [ctx.cli("train", recipe(ctx, "pendulum-swingup-ppo.yaml"), *TINY_RUN, "name=tiny")], ctx.work / "runs/tiny"


def _build_long(ctx: Ctx) -> tuple[list[Run], Path]:
    return [ctx.cli("train", recipe(ctx, "pendulum-swingup-ppo.yaml"), *LONG_RUN, "name=long")], ctx.work / "runs/long"


def _build_dataset(ctx: Ctx) -> tuple[list[Run], Path]:
    return [ctx.cli(*REACH, "--episodes", "6", "--out", "data/reach")], ctx.work / "data/reach"


def _build_quad(ctx: Ctx) -> tuple[list[Run], Path]:
    trained = ctx.cli("train", recipe(ctx, "quadruped-walk-ppo.yaml"), *QUAD_RUN, "name=quad")
    if trained.returncode != 0:
        return [trained], ctx.work / "runs/quad"
    return [trained, ctx.cli("export", "runs/quad", "--format", "onnx")], ctx.work / "runs/quad"


FIXTURES = {"run": _build_run, "long": _build_long, "dataset": _build_dataset, "quad": _build_quad}
"""Fixtures probes copy: name → builder (runs the CLI in a Ctx; returns its runs and the fixture's path)."""


@dataclasses.dataclass
class Result:
    probe: Probe
    verdict: Verdict
    outcome: str
    seconds: float


def build_fixtures(names: set[str], root: Path, tree: Path, jobs: int, console: Console) -> dict[str, Path | str]:
    """Build the named fixtures (in parallel with jobs > 1); a failed one maps to the reason it failed."""

    def build(name: str) -> Path | str:
        ctx = Ctx(root / "fixtures" / name, tree, {})
        runs, path = FIXTURES[name](ctx)
        failed = [run for run in runs if run.returncode != 0]
        if failed:
            return f"fixture {name!r} could not be built: {failed[0].summary()}"
        console.print(f"[dim]fixture {name}: {sum(run.seconds for run in runs):.0f} s[/dim]")
        return path

    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        return dict(zip(sorted(names), pool.map(build, sorted(names)), strict=True))


def run_probe(probe: Probe, root: Path, tree: Path, fixtures: dict[str, Path | str], keep: bool) -> Result:
    """Run one probe in its own directory under `root` and classify it."""
    ctx = Ctx(root / re.sub(r"[^A-Za-z0-9._-]+", "_", probe.name).strip("_"), tree, {})
    start = time.monotonic()
    broken = [fixtures[name] for name in probe.needs if isinstance(fixtures[name], str)]
    if broken:
        verdict = Verdict("traceback" if "Traceback" in broken[0] else "silent", broken[0])
    else:
        ctx.fixtures = {name: fixtures[name] for name in probe.needs}
        try:
            verdict = worst(ctx, probe.run(ctx))
        except Exception as err:
            verdict = worst(ctx, Verdict("silent", f"unexpected state ({type(err).__name__}: {err})"))
    outcome = ctx.runs[-1].summary().replace(f"{ctx.work}/", "") if ctx.runs else "-"
    if not keep:
        shutil.rmtree(ctx.root, ignore_errors=True)
    return Result(probe, verdict, outcome, time.monotonic() - start)


def run_all(probes: list[Probe], root: Path, tree: Path, jobs: int, keep: bool, console: Console) -> list[Result]:
    needs = {name for probe in probes for name in probe.needs}
    fixtures = build_fixtures(needs, root, tree, jobs, console)
    results: list[Result | None] = [None] * len(probes)
    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        futures = {pool.submit(run_probe, p, root, tree, fixtures, keep): i for i, p in enumerate(probes)}
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            result = results[futures[future]] = future.result()
            console.print(f"[{done}/{len(probes)}] {result.probe.name}: {result.verdict.cls} ({result.seconds:.0f} s)")
    return [r for r in results if r is not None]


def summary(results: list[Result]) -> dict[str, int]:
    counts = Counter(r.verdict.cls for r in results)
    good = sum(counts[c] for c in GOOD)
    return {
        "probes": len(results),
        "clear_or_held": good,
        "bad": len(results) - good,
        "data_loss": counts["data_loss"],
        "code_execution": counts["code_execution"],
    }


def table(results: list[Result], title: str) -> Table:
    out = Table(title=title, show_lines=False)
    for column in ("probe", "class", "expected", "outcome", "detail"):
        out.add_column(column, overflow="fold")
    for r in results:
        cls = r.verdict.cls
        style = "green" if cls in r.probe.expected else "yellow" if cls in GOOD else "bold red"
        out.add_row(r.probe.name, f"[{style}]{cls}[/{style}]", r.probe.expected, r.outcome, r.verdict.detail)
    return out


def main(argv: list[str] | None = None) -> dict[str, int]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=None, help="run the probes whose name or group contains this")
    parser.add_argument("--jobs", type=int, default=1, help="probes run at once (each is its own processes)")
    parser.add_argument("--keep", action="store_true", help="keep every probe's directory (printed at the end)")
    parser.add_argument("--tree", type=Path, default=CHECKOUT, help="source checkout to probe (with configs/)")
    args = parser.parse_args(argv)
    tree = args.tree.resolve()
    if not (tree / "policyforge" / "cli.py").is_file() or not (tree / "configs").is_dir():
        parser.error(f"--tree {tree} holds no policyforge/cli.py and configs/: give a source checkout (--tree DIR)")
    only = (args.only or "").lower()
    probes = [p for p in PROBES if only in p.name.lower() or only in p.group.lower()]
    if not probes:
        parser.error(f"no probe matches --only {args.only!r}")
    console = Console(width=220)
    root = Path(tempfile.mkdtemp(prefix="policyforge-robustness-"))
    start = time.monotonic()
    try:
        results = run_all(probes, root, tree, args.jobs, args.keep, console)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    wall = time.monotonic() - start
    console.print(
        table(results, f"robustness of {tree}: {len(results)} probes, {wall / 60:.1f} min, --jobs {args.jobs}")
    )
    if args.keep:
        console.print(f"probe directories kept in {root}")
    counts = summary(results)
    print(json.dumps(counts))
    return counts


if __name__ == "__main__":
    main()
