"""Probes of `robustness.py`, part 2: malicious checkpoints, corrupted checkpoints and metrics, and run-state
misuse (a finished run resumed, two resumes at once)."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from pathlib import Path

from policyforge.bench.robustness_kit import Ctx, Probe, Verdict, parse_eval, read_json, refused, registrar, variant
from policyforge.bench.robustness_probes import LONGER, TINY, recipe

PROBES: list[Probe] = []
probe = registrar(PROBES)


# -- malicious checkpoints: refused, nothing in them runs -------------------------------------------------


class _RunsCode:
    """Unpickling this calls `function(argument)`, as a malicious checkpoint would."""

    def __init__(self, function: Callable, argument: str):
        self.function, self.argument = function, argument

    def __reduce__(self):
        return self.function, (self.argument,)


def hostile_checkpoint(ctx: Ctx, name: str, kind: str = "torch.save") -> Path:
    """A file `name` in the working directory that creates the probe's marker when unpickled: a torch checkpoint
    with a payload in its state ("torch.save"), a bare pickle ("pickle"), or the payload inside policyforge's
    checksummed container ("wrapped", format policyforge-checkpoint/2, with a matching sha256)."""
    import hashlib
    import io
    import pickle

    import torch

    path = ctx.work / name
    payload = _RunsCode(os.system, f"touch {ctx.marker}")
    if kind == "pickle":
        path.write_bytes(pickle.dumps(payload))
        return path
    inner = io.BytesIO()
    torch.save({"algo": {"policy": payload}, "env_steps": 0}, inner)
    if kind == "wrapped":
        data = inner.getvalue()
        tensor = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        wrapped = {"format": "policyforge-checkpoint/2", "sha256": hashlib.sha256(data).hexdigest(), "payload": tensor}
        inner = io.BytesIO()
        torch.save(wrapped, inner)
    path.write_bytes(inner.getvalue())
    return path


def _hostile_run(ctx: Ctx) -> Path:
    run = ctx.copy("run", "runs/shared")
    for path in (run / "checkpoints").glob("*.pt"):
        path.write_bytes(hostile_checkpoint(ctx, "evil.pt").read_bytes())
    return run


PPO = "pendulum-swingup-ppo.yaml"
MALICIOUS = {
    "eval RUN": lambda ctx: ["eval", _hostile_run(ctx), "--envs", "2"],
    "eval --checkpoint wrapped.pt": lambda ctx: [
        "eval", ctx.copy("run", "runs/tiny"), "--checkpoint", hostile_checkpoint(ctx, "wrapped.pt", "wrapped")],
    "train --resume RUN": lambda ctx: ["train", "--resume", _hostile_run(ctx), LONGER],
    "train init_policy=RUN": lambda ctx: [
        "train", recipe(ctx, PPO), *TINY, "name=probe", f"init_policy={_hostile_run(ctx)}"],
    "train init_policy=evil.pt": lambda ctx: [
        "train", recipe(ctx, PPO), *TINY, "name=probe", f"init_policy={hostile_checkpoint(ctx, 'evil.pt', 'pickle')}"],
    "collect --policy RUN": lambda ctx: [
        "collect", "pendulum-swingup", "--episodes", "1", "--envs", "1", "--policy", _hostile_run(ctx), "--out", "x"],
    "export RUN": lambda ctx: ["export", _hostile_run(ctx), "--format", "onnx"],
    "deploy RUN": lambda ctx: ["deploy", _hostile_run(ctx), "--robot", "go2", "--peer", "sim", "--seconds", "1"],
}  # fmt: skip
"""Each command that loads a checkpoint → its arguments with a malicious checkpoint."""


def _malicious(arguments: Callable[[Ctx], list], ctx: Ctx) -> Verdict:
    return refused(ctx.cli(*arguments(ctx)), ".pt")


for _name, _arguments in MALICIOUS.items():
    PROBES.append(
        variant(f"malicious checkpoint: {_name}", "malicious", "clear_error", _malicious, _arguments, needs=["run"])
    )


# -- corrupted checkpoints: the newest intact one, with a warning, or a clear error -----------------------


def flip_bytes(path: Path, count: int = 50, seed: int = 0) -> None:
    data = bytearray(path.read_bytes())
    for position in random.Random(seed).sample(range(len(data)), count):
        data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


DAMAGE = {
    "truncated": truncate,
    "emptied": lambda path: path.write_bytes(b""),
    "deleted": lambda path: path.unlink(),
    "50 flipped bytes": flip_bytes,
    "replaced by text": lambda path: path.write_text("not a checkpoint\n"),
}


def _fallback_eval(damage: str, ctx: Ctx) -> Verdict:
    run = ctx.copy("run", "runs/tiny")
    expected = read_json(run / "summary.json")["eval/return"]
    numbered = sorted((run / "checkpoints").glob("step_*.pt"))  # all named by the current policyforge: in order
    ctx.protect(*numbered)
    DAMAGE[damage](run / "checkpoints" / "latest.pt")
    done = ctx.cli("eval", run)
    if done.returncode != 0:
        return refused(done, "latest.pt")  # at best a clear error; an intact checkpoint was there
    got = parse_eval(done).get("eval/return")
    if got is None or abs(got - expected) > 1e-3 * max(1.0, abs(expected)):
        return Verdict("silent", f"eval/return {got} ≠ {expected:.4g} of the intact checkpoint")
    if not done.names("latest.pt"):
        return Verdict("silent", "evaluated without a word about the damaged latest.pt")
    return Verdict("held", f"fell back to {numbered[-1].name} with a warning; same eval/return")


def _fallback_resume(damage: str, ctx: Ctx) -> Verdict:
    run = ctx.copy("run", "runs/tiny")
    DAMAGE[damage](run / "checkpoints" / "latest.pt")
    done = ctx.cli("train", "--resume", run, LONGER)
    if done.returncode != 0:
        return refused(done, "latest.pt")
    steps = read_json(run / "summary.json").get("env_steps")
    if steps != 1536:
        return Verdict("silent", f"exit 0 but summary.json says env_steps={steps}, not 1536")
    if not done.names("latest.pt"):
        return Verdict("silent", "resumed without a word about the damaged latest.pt")
    return Verdict("held", "resumed from the newest intact checkpoint with a warning, trained to 1,536")


for _damage in DAMAGE:
    PROBES.append(
        variant(f"latest.pt {_damage}, then eval", "checkpoint", "held", _fallback_eval, _damage, needs=["run"])
    )
for _damage in ("truncated", "emptied", "50 flipped bytes"):
    PROBES.append(
        variant(f"latest.pt {_damage}, then --resume", "checkpoint", "held", _fallback_resume, _damage, needs=["run"])
    )


@probe("every checkpoint damaged, then eval", "checkpoint", "clear_error", needs=("run",))
def _all_damaged(ctx: Ctx) -> Verdict:
    run = ctx.copy("run", "runs/tiny")
    for seed, path in enumerate(sorted((run / "checkpoints").glob("*.pt"))):
        flip_bytes(path, seed=seed) if seed % 2 else truncate(path)
    return refused(ctx.cli("eval", run), "latest.pt", "step_0")


@probe("checkpoints/ deleted, then eval", "checkpoint", "clear_error", needs=("run",))
def _no_checkpoints(ctx: Ctx) -> Verdict:
    run = ctx.copy("run", "runs/tiny")
    for path in (run / "checkpoints").glob("*.pt"):
        path.unlink()
    (run / "checkpoints").rmdir()
    return refused(ctx.cli("eval", run), "checkpoint")


@probe("eval --checkpoint <a truncated numbered checkpoint>", "checkpoint", "clear_error", needs=("run",))
def _given_truncated(ctx: Ctx) -> Verdict:
    run = ctx.copy("run", "runs/tiny")
    given = sorted((run / "checkpoints").glob("step_*.pt"))[-1]
    truncate(given)
    return refused(ctx.cli("eval", run, "--checkpoint", given), given.name)


@probe("train init_policy=<a truncated checkpoint>", "checkpoint", "clear_error", needs=("run",))
def _init_policy_truncated(ctx: Ctx) -> Verdict:
    source = ctx.copy("run", "runs/tiny") / "checkpoints" / "latest.pt"
    truncate(source)
    done = ctx.cli("train", recipe(ctx, "pendulum-swingup-ppo.yaml"), *TINY, "name=ft", f"init_policy={source}")
    return refused(done, "init_policy", "latest.pt")


# -- metrics.jsonl: a torn or blank line does not strand a run --------------------------------------------

METRICS_DAMAGE = {
    "torn last line": lambda text: text + '{"env_steps": 1100, "train/ret',
    "blank line": lambda text: text.replace("\n", "\n\n", 3),
}


def _metrics_resume(damage: str, ctx: Ctx) -> Verdict:
    run = ctx.copy("run", "runs/tiny")
    metrics = run / "metrics.jsonl"
    before = [json.loads(line) for line in metrics.read_text().splitlines()]
    metrics.write_text(METRICS_DAMAGE[damage](metrics.read_text()))
    done = ctx.cli("train", "--resume", run, LONGER)
    if done.returncode != 0:
        return refused(done, "metrics.jsonl")
    try:
        after = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    except json.JSONDecodeError as err:
        return Verdict("silent", f"metrics.jsonl no longer parses: {err}")
    if after[: len(before)] != before:
        return Verdict("data_loss", "the records before the resume point changed")
    if after[-1].get("env_steps") != 1536:
        return Verdict("silent", f"the last record is at {after[-1].get('env_steps')}, not 1536")
    return Verdict("held", "resumed to 1,536 steps; earlier records intact")


for _damage in METRICS_DAMAGE:
    PROBES.append(
        variant(f"metrics.jsonl {_damage}, then --resume", "metrics", "held", _metrics_resume, _damage, needs=["run"])
    )


# -- run state --------------------------------------------------------------------------------------------


@probe("resume a finished run", "run state", "clear_error", needs=("run",))
def _resume_finished(ctx: Ctx) -> Verdict:
    run = ctx.copy("run", "runs/tiny")
    for name in ("metrics.jsonl", "summary.json", "config.yaml", "checkpoints"):
        ctx.protect(run / name)
    return refused(ctx.cli("train", "--resume", run), "finished")


@probe("two --resume of one run at once", "run state", "held", needs=("run",))
def _concurrent_resume(ctx: Ctx) -> Verdict:
    run = ctx.copy("run", "runs/tiny")
    longer = "runner.total_env_steps=4096"  # 24 more iterations: the second start overlaps the first's training
    first, second = ctx.start("train", "--resume", run, longer), ctx.start("train", "--resume", run, longer)
    runs = [ctx.collect(first), ctx.collect(second)]
    codes = [r.returncode for r in runs]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r["env_steps"] for r in records if "perf/sps" in r]  # one per training iteration
    if codes.count(0) != 1:
        return Verdict(
            "silent", f"exit codes {codes}: both trained the run" if codes == [0, 0] else f"exit codes {codes}"
        )
    if steps != sorted(steps) or len(steps) != len(set(steps)):
        return Verdict("silent", "metrics.jsonl interleaves the two processes' records")
    loser, winner = (runs[1], first) if codes[0] == 0 else (runs[0], second)
    verdict = refused(loser, "train.lock", "lock", "being trained")
    if verdict.cls == "clear_error" and not loser.names(str(winner.pid)):
        return Verdict("clear_error", "the second was refused without naming the process holding the lock")
    return (
        Verdict("held", "one trained; the other was refused naming the lock holder")
        if verdict.cls == "clear_error"
        else verdict
    )


@probe("resume a folder that is not a run", "run state", "clear_error")
def _resume_not_a_run(ctx: Ctx) -> Verdict:
    ctx.sentinel("stuff/notes.txt")
    return refused(ctx.cli("train", "--resume", "stuff"), "stuff")
