"""Distilling a VLA into compact experts: per instruction family, the VLA teacher's success (and the same VLA's at
another stage: after its own PPO), students by BC from the teacher's rollouts, DAgger and RPD, and PPO alone from
scratch on the same env steps (on the sparse success reward, and on the dense one RPD learns from); env steps to
reach the teacher's success, wall time, and batch-1 decision latency;
plus a locomotion row (a privileged PPO teacher on quadruped-walk → a proprioceptive-history student by DAgger,
tracking error).

    policyforge bench distill-table --teacher runs/vla-bc [--compare-teacher runs/vla-ppo] [--families touch lift push]
        [--seeds 0 1 2] [--steps 204800] [--walk-teacher RUN] [--walk-steps 2000000] [--out bench/results/distill]

Students come from `configs/vla-distill.yaml` (`policyforge distill`'s recipe) on the teacher's simulation settings.
Each run's result is kept in OUT/results/<name>.json and reused by a later invocation with the same sizes, so a long
table can be split across sessions. The last line is one JSON object: {"tasks": {family: {"teacher", "rpd",
"dagger", "bc", "ppo_only", "ppo_only_dense", "rpd_steps_to_teacher", "ppo_only_steps_to_teacher",
"ppo_only_dense_steps_to_teacher"}}, "latency_ratio", "locomotion_student_over_teacher_error"} (success rates are
means over seeds; steps to the teacher are null unless every seed reaches it).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from policyforge import config as config_io
from policyforge.algos.checkpoint import resolve
from policyforge.algos.distill_command import decision_ms, distill_config, evaluate_run
from policyforge.algos.logger import read_metrics
from policyforge.algos.ppo_config import PPOConfig
from policyforge.algos.runner import RunConfig, Runner, load_run
from policyforge.bench._kept import kept_result
from policyforge.cli import find_recipe
from policyforge.policies.export import file_sha256

STUDENTS = ("bc", "dagger", "rpd", "ppo_only", "ppo_only_dense")
"""The methods compared per family: distillation modes, and PPO alone on the student: on the sparse success reward
(the issue's baseline) and on the dense progress reward RPD's PPO learns from (the same run without the teacher)."""
PPO_ALONE = {"ppo_only": "sparse", "ppo_only_dense": "dense"}
"""PPO alone's reward_type per method."""
STEPS_TO_TEACHER = ("rpd", "ppo_only", "ppo_only_dense")
"""The methods whose env steps to the teacher's success the table reports."""


def student_config(args: argparse.Namespace, family: str, method: str, seed: int) -> RunConfig:
    """A student run of `method` on `family`: the distill recipe on the teacher's settings; PPO alone keeps only
    PPO's settings (the same student and env steps, no teacher) with its `PPO_ALONE` reward."""
    overrides = [f"seed={seed}", f"runner.total_env_steps={args.steps}", f"runner.eval_every_steps={args.eval_every}"]
    overrides += [f"out_dir={args.out / 'runs'}", f"name={family}-{method}-s{seed}", "runner.video=none"]
    mode = "rpd" if method in PPO_ALONE else method
    config = distill_config(args.teacher, family, mode, find_recipe("vla-distill"), overrides)
    if method not in PPO_ALONE:
        return config
    data = config_io.to_dict(config)
    ppo_fields = {field.name for field in dataclasses.fields(PPOConfig)}
    data["algo"] = {k: v for k, v in data["algo"].items() if k in ppo_fields or k == config_io.TAG_KEY}
    data["algo"][config_io.TAG_KEY] = "ppo"
    data["sim"]["image"] = {"cameras": []}  # no teacher: nothing reads images
    data["sim"]["task_options"]["reward_type"] = PPO_ALONE[method]
    return config_io.from_dict(RunConfig, data)


def steps_to(run_dir: Path, success: float) -> int | None:
    """The first evaluation's env steps at which the run's success reached `success`; None if it never did."""
    for record in read_metrics(run_dir):
        if record.get("eval/success", -1.0) >= success and success > 0:
            return int(record["env_steps"])
    return None


SPLIT = {"sim": "perf/sim_s", "teacher": "perf/teacher_s", "student": "perf/act_s", "update": "perf/update_s"}
"""Where a student run's training time went (summed over its iterations): the simulator (and any images it renders
each step), the teacher (its decisions and the frames rendered for them on request), the student acting, updates."""


def train_student(config: RunConfig, teacher_success: float) -> dict[str, Any]:
    runner = Runner.start(config, Console(quiet=True))
    started = time.perf_counter()
    summary = runner.train()
    runner.close()
    records = read_metrics(runner.run_dir)
    return {
        "success": summary["eval/success"],
        "steps_to_teacher": steps_to(runner.run_dir, teacher_success),
        "wall_s": time.perf_counter() - started,
        "env_steps": summary["env_steps"],
        "split_s": {part: sum(r.get(key, 0.0) for r in records) for part, key in SPLIT.items()},
    }


def cached(
    args: argparse.Namespace, name: str, compute, *inputs, of_the_vla: bool = True, settings: str | None = None
) -> dict[str, Any]:
    """`compute(*inputs)`, or an earlier invocation's result at the same sizes (OUT/results/<name>.json), for
    results `of_the_vla` (all but the walking row) of the same VLA teacher checkpoint, and of the same `settings`
    (a student's: `settings_digest`)."""
    sizes = {"steps": args.steps, "eval_every": args.eval_every, "walk_steps": args.walk_steps}
    if of_the_vla:
        sizes["teacher"] = args.teacher_sha  # another teacher (retrained, another run) is another table
    if settings is not None:
        sizes["settings"] = settings  # another recipe (its reward, λ, std) is another result
    return kept_result(args.out / "results" / f"{name}.json", sizes, lambda: compute(*inputs))


def family_rows(args: argparse.Namespace, family: str, console: Console) -> dict[str, list[dict[str, Any]]]:
    """Every method's result per seed on one family."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for seed in args.seeds:
        teacher = cached(args, f"{family}-teacher-s{seed}", evaluate_run, args.teacher, "best", 32, family, seed)
        rows.setdefault("teacher", []).append(teacher)
        if args.compare_teacher is not None:
            name = f"{family}-compare_teacher-s{seed}"
            rows.setdefault("compare_teacher", []).append(
                cached(args, name, evaluate_run, args.compare_teacher, "best", 32, family, seed)
            )
        for method in args.methods:
            config = student_config(args, family, method, seed)
            name = f"{family}-{method}-s{seed}"
            result = cached(
                args, name, train_student, config, teacher["eval/success"], settings=settings_digest(config)
            )
            rows.setdefault(method, []).append(result)
            split = ", ".join(f"{part} {seconds:.0f}" for part, seconds in result.get("split_s", {}).items())
            console.print(
                f"{family} seed {seed} {method}: success {result['success']:.0%} ({result['wall_s']:.0f} s: {split})"
            )
    return rows


def walk_row(args: argparse.Namespace) -> dict[str, Any]:
    """The privileged walking teacher's tracking error and a proprio-history DAgger student's."""
    teacher = evaluate_run(args.walk_teacher, "best", 16, None, 0)
    overrides = [f"runner.total_env_steps={args.walk_steps}", f"out_dir={args.out / 'runs'}", "name=walk-dagger"]
    overrides += [
        "policy.obs_key=policy",
        "policy.history=5",
        "algo.class=distill",
        f"algo.teacher={args.walk_teacher}",
    ]
    overrides += ["algo.mode=dagger", "runner.video=none", "algo.updates_per_iteration=100", "algo.batch_size=4096"]
    config = config_io.load(RunConfig, find_recipe("quadruped-walk-ppo"), overrides)
    runner = Runner.start(config, Console(quiet=True))
    summary = runner.train()
    runner.close()
    error = summary["eval/terms/lin_vel_error"], teacher["eval/terms/lin_vel_error"]
    returns = summary["eval/return"], teacher["eval/return"]
    return {"student_error": error[0], "teacher_error": error[1], "ratio": error[0] / error[1],
            "student_return": returns[0], "teacher_return": returns[1]}  # fmt: skip


def settings_digest(config: RunConfig) -> str:
    """A student run's settings, less where it is written: 16 hex digits."""
    data = {k: v for k, v in config_io.to_dict(config).items() if k not in ("name", "out_dir")}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def mean(results: list[dict[str, Any]], key: str) -> float:
    return statistics.fmean(r[key] for r in results)


def mean_of(rows: dict[str, list[dict[str, Any]]], method: str, key: str = "success") -> float | None:
    """`method`'s mean `key` over seeds; None when the table did not run it (`--methods`)."""
    return mean(rows[method], key) if method in rows else None


def steps_to_teacher(rows: dict[str, list[dict[str, Any]]], method: str) -> list[int | None]:
    return [r["steps_to_teacher"] for r in rows.get(method, [])]


def print_table(console: Console, table_rows: dict[str, dict[str, list[dict[str, Any]]]]) -> None:
    table = Table(title="distilling the VLA: success per family (mean over seeds), env steps to the teacher's success")
    steps = ("RPD steps", "PPO-only steps", "PPO-only (dense) steps")
    for column in ("family", "teacher", "other teacher", *STUDENTS, *steps, "wall (RPD)"):
        table.add_column(column)
    for family, rows in table_rows.items():
        success = {m: "-" if (rate := mean_of(rows, m)) is None else f"{rate:.0%}" for m in STUDENTS}
        reached = {m: steps_to_teacher(rows, m) for m in STEPS_TO_TEACHER}
        other = f"{mean(rows['compare_teacher'], 'eval/success'):.0%}" if "compare_teacher" in rows else "-"
        table.add_row(
            family, f"{mean(rows['teacher'], 'eval/success'):.0%}", other, *success.values(),
            *(", ".join("-" if s is None else f"{s:,}" for s in reached[m]) or "-" for m in reached),
            "-" if "rpd" not in rows else f"{mean(rows['rpd'], 'wall_s') / 60:.0f} min",
        )  # fmt: skip
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", type=Path, required=True, help="the VLA run the students learn from")
    parser.add_argument(
        "--compare-teacher",
        type=Path,
        default=None,
        help="the VLA at another stage (before or after its PPO), evaluated beside it",
    )
    parser.add_argument("--families", nargs="+", default=["touch", "lift", "push"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", choices=STUDENTS, default=list(STUDENTS), help="the students run")
    parser.add_argument("--steps", type=int, default=204_800, help="env steps of every student run")
    parser.add_argument("--eval-every", type=int, default=25_600)
    parser.add_argument("--walk-teacher", type=Path, default=None, help="a privileged PPO run on quadruped-walk")
    parser.add_argument("--walk-steps", type=int, default=2_000_000)
    parser.add_argument("--out", type=Path, default=Path("bench/results/distill"))
    args = parser.parse_args()
    args.teacher_sha = file_sha256(resolve(args.teacher, "best"))[:16]
    torch.set_num_threads(1)  # as training runs (runner.torch_threads): latencies and evaluations alike
    console = Console(width=170)
    table_rows = {family: family_rows(args, family, console) for family in args.families}
    print_table(console, table_rows)
    students = [student_ms(student_config(args, args.families[0], "rpd", args.seeds[0]))]
    teacher_ms = decision_ms_of(args.teacher)  # side by side, after the runs: the same load on the machine
    walk = cached(args, "walk", walk_row, args, of_the_vla=False) if args.walk_teacher is not None else None
    if walk is not None:
        console.print(f"quadruped-walk: teacher {walk['teacher_error']:.3f} m/s, student {walk['student_error']:.3f}")
    console.print(f"batch-1 decision: student {students[0]:.3f} ms, teacher {teacher_ms:.1f} ms")
    tasks = {}
    for family, rows in table_rows.items():
        tasks[family] = {"teacher": round(mean(rows["teacher"], "eval/success"), 4)}
        tasks[family].update({m: None if (rate := mean_of(rows, m)) is None else round(rate, 4) for m in STUDENTS})
        for method in STEPS_TO_TEACHER:
            reached = steps_to_teacher(rows, method)
            tasks[family][f"{method}_steps_to_teacher"] = (
                None if None in reached or not reached else statistics.fmean(reached)
            )
    summary = {
        "tasks": tasks,
        "latency_ratio": round(students[0] / teacher_ms, 5),
        "locomotion_student_over_teacher_error": None if walk is None else round(walk["ratio"], 3),
        "seeds": args.seeds,
        "steps": args.steps,
    }
    print(json.dumps(summary))


def decision_ms_of(run_dir: Path) -> float:
    """A trained policy's batch-1 decision time, ms, on an observation of its own task (its best checkpoint)."""
    _, policy, env = load_run(run_dir, "best", 1)
    result = decision_ms(policy, env.reset(seed=0))
    env.close()
    return result


def student_ms(config: RunConfig) -> float:
    """The student architecture's batch-1 decision time, ms (the weights do not change it: those of a fresh build, so
    a table whose runs were kept from another machine needs none of their directories)."""
    from policyforge.algos.build import build_policy
    from policyforge.sims import make_env

    env = make_env(dataclasses.replace(config.sim, num_envs=1))
    policy = build_policy(config, env).eval()
    result = decision_ms(policy, env.reset(seed=0))
    env.close()
    return result


if __name__ == "__main__":
    main()
