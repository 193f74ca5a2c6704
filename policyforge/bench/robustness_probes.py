"""Probes of `robustness.py`, part 1: bad configs and CLI arguments, and path attacks (names that are paths,
commands that would delete what policyforge did not create). Part 2, checkpoints and run files: robustness_runs.py."""

from __future__ import annotations

from policyforge.bench.robustness_kit import Ctx, Probe, Verdict, refused, registrar, variant

PROBES: list[Probe] = []

TINY = ["sim.num_envs=8", "algo.rollout_steps=16", "algo.epochs=2", "runner.total_env_steps=256", "runner.eval_envs=2",
        "runner.video=none", "runner.tensorboard=false", "out_dir=runs"]  # fmt: skip
"""A PPO run on pendulum-swingup short enough that an input wrongly accepted costs a few seconds."""
TINY_SAC = ["sim.num_envs=8", "algo.learning_starts=64", "algo.batch_size=32", "algo.buffer_size=2048",
            "runner.total_env_steps=256", "runner.eval_envs=2", "runner.video=none", "runner.tensorboard=false",
            "out_dir=runs"]  # fmt: skip
LONGER = "runner.total_env_steps=1536"
"""Resuming the finished fixture run (1,024 steps) with this trains 4 more iterations."""


probe = registrar(PROBES)


def recipe(ctx: Ctx, name: str) -> str:
    return str(ctx.tree / "configs" / name)


# -- configs: refused before any work, naming the field ---------------------------------------------------

CONFIG_CASES = {
    "algo.actor_lr=nan": ("ppo", "algo.actor_lr"),
    "algo.critic_lr=inf": ("ppo", "algo.critic_lr"),
    "algo.gamma=-1": ("ppo", "algo.gamma"),
    "algo.max_grad_norm=-1": ("ppo", "algo.max_grad_norm"),
    "algo.value_coef=-1": ("ppo", "algo.value_coef"),
    "algo.entropy_coef=inf": ("ppo", "algo.entropy_coef"),
    "algo.target_kl=-1": ("ppo", "algo.target_kl"),
    "algo.gamma=0": ("sac", "algo.gamma"),
    "algo.tau=nan": ("sac", "algo.tau"),
    "algo.actor_lr=inf": ("sac", "algo.actor_lr"),
    "algo.init_alpha=-1": ("sac", "algo.init_alpha"),
    "sim.num_envs=0": ("ppo", "sim.num_envs"),
    "sim.randomization.friction=[0.5,.inf]": ("ppo", "sim.randomization.friction"),
    "sim.randomization.mass_scale=[1e-12,1e12]": ("ppo", "sim.randomization.mass_scale"),
    "seed=-1": ("ppo", "seed"),
    "seed=4294967296": ("ppo", "seed"),
    "algo.clip_ration=0.2": ("ppo", "algo.clip_ration"),
    "sim.num_envs=[8,": ("ppo", "sim.num_envs"),
}
"""Override → (algorithm of the recipe, what the refusal must name)."""


def _bad_override(override: str, algo: str, field: str, ctx: Ctx) -> Verdict:
    base = [recipe(ctx, "pendulum-swingup-ppo.yaml"), *TINY] if algo == "ppo" else []
    base = base or [recipe(ctx, "pendulum-swingup-sac.yaml"), *TINY_SAC]
    return refused(ctx.cli("train", *base, "name=probe", override), field)


for _override, (_algo, _field) in CONFIG_CASES.items():
    PROBES.append(variant(f"train {_override}", "config", "clear_error", _bad_override, _override, _algo, _field))


@probe("train malformed YAML file", "config", "clear_error")
def _malformed_yaml(ctx: Ctx) -> Verdict:
    (ctx.work / "broken.yaml").write_text(
        "algo: {class: ppo}\nsim:\n  task: pendulum-swingup\n  num_envs: [8,\nalgo: {\n"
    )
    return refused(ctx.cli("train", "broken.yaml", *TINY, "name=probe"), "broken.yaml")


@probe("train override without '='", "config", "clear_error")
def _no_equals(ctx: Ctx) -> Verdict:
    return refused(ctx.cli("train", recipe(ctx, "pendulum-swingup-ppo.yaml"), *TINY, "sim.num_envs"), "sim.num_envs")


# -- CLI flags --------------------------------------------------------------------------------------------

COLLECT = ["collect", "arm-reach", "episode_seconds=0.4", "--episodes", "2", "--envs", "2", "--out", "data/new"]


@probe("eval --envs 0", "cli", "clear_error", needs=("run",))
def _eval_envs_zero(ctx: Ctx) -> Verdict:
    return refused(ctx.cli("eval", ctx.copy("run", "runs/tiny"), "--envs", "0"), "--envs")


def _bad_flag(flag: str, value: str, ctx: Ctx) -> Verdict:
    return refused(ctx.cli(*COLLECT, flag, value), flag)


for _flag, _value in (("--noise", "nan"), ("--noise", "inf")):
    PROBES.append(variant(f"collect {_flag} {_value}", "cli", "clear_error", _bad_flag, _flag, _value))


# -- paths: names are names; nothing policyforge did not create is deleted --------------------------------

DEMO = ["runner.total_env_steps=256", "sim.num_envs=4", "algo.rollout_steps=16", "algo.epochs=1", "runner.eval_envs=1",
        "runner.video=none", "runner.tensorboard=false"]  # fmt: skip


@probe("demo name=..", "paths", "clear_error", needs=("run",))
def _demo_parent(ctx: Ctx) -> Verdict:
    ctx.sentinel("notes.txt")
    ctx.protect(ctx.copy("run", "runs/tiny"))
    return refused(ctx.cli("demo", "name=..", *DEMO), "name")


@probe("demo name=.", "paths", "clear_error", needs=("run",))
def _demo_dot(ctx: Ctx) -> Verdict:
    ctx.protect(ctx.copy("run", "runs/tiny"))
    ctx.sentinel("runs/notes.txt")
    return refused(ctx.cli("demo", "name=.", *DEMO), "name")


@probe("demo twice with one name, then with a user's file in its run", "paths", "clear_error or held")
def _demo_rerun(ctx: Ctx) -> Verdict:
    run = ctx.work / "runs" / "again"
    for attempt in ("first", "second"):
        done = ctx.cli("demo", "name=again", *DEMO)
        if done.returncode != 0 or not (run / "checkpoints" / "latest.pt").is_file():
            return Verdict("silent", f"the {attempt} demo failed or left no checkpoint: {done.last_line()}")
    ctx.sentinel("runs/again/mine.txt")
    verdict = refused(ctx.cli("demo", "name=again", *DEMO), "mine.txt")
    detail = "a demo replaces its own run; with a user's file in it, refused naming the file"
    return Verdict("held", detail) if verdict.cls == "clear_error" else verdict


@probe("demo name=/abs/dir", "paths", "clear_error")
def _demo_absolute(ctx: Ctx) -> Verdict:
    target = ctx.root / "elsewhere"
    target.mkdir()
    (target / "thesis.tex").write_text("years of work\n")
    ctx.protect(target / "thesis.tex")
    return refused(ctx.cli("demo", f"name={target}", *DEMO), "name")


@probe("demo name=<existing training run>", "paths", "clear_error", needs=("run",))
def _demo_over_run(ctx: Ctx) -> Verdict:
    ctx.protect(ctx.copy("run", "runs/tiny"))
    return refused(ctx.cli("demo", "name=tiny", *DEMO), "name", "runs/tiny")


@probe("train name=../../x", "paths", "clear_error")
def _train_escape(ctx: Ctx) -> Verdict:
    verdict = refused(ctx.cli("train", recipe(ctx, "pendulum-swingup-ppo.yaml"), *TINY, "name=../../x"), "name")
    outside = ctx.root / "home" / "x"
    if outside.exists() and verdict.cls in ("clear_error", "silent"):
        return Verdict("silent", f"wrote outside out_dir ({outside.relative_to(ctx.root)} exists); {verdict.detail}")
    return verdict


@probe("train name=/abs/dir", "paths", "clear_error")
def _train_absolute(ctx: Ctx) -> Verdict:
    target = ctx.root / "elsewhere"
    verdict = refused(ctx.cli("train", recipe(ctx, "pendulum-swingup-ppo.yaml"), *TINY, f"name={target}"), "name")
    if target.exists() and verdict.cls in ("clear_error", "silent"):
        return Verdict("silent", f"wrote outside out_dir ({target.name}/ created); {verdict.detail}")
    return verdict


@probe("collect --overwrite --out <user folder>", "paths", "clear_error")
def _collect_overwrite(ctx: Ctx) -> Verdict:
    ctx.sentinel("mine/photos.txt")
    return refused(ctx.cli(*COLLECT[:-1], "mine", "--overwrite"), "mine", "--out")
