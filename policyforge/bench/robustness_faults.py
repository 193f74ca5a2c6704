"""Probes of `robustness.py`, part 2: damaged datasets, SIGKILL loops, a full disk (a file-size limit), and
hostile policies and observations on deploy against the simulated Go2."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

from policyforge.bench.robustness_kit import Ctx, Probe, Verdict, kill_after, read_json, refused, registrar, variant
from policyforge.bench.robustness_probes import LONGER, recipe

PROBES: list[Probe] = []

REACH = ["collect", "arm-reach", "episode_seconds=0.4", "--envs", "2"]
"""How the dataset fixture was collected (with --episodes 6): collecting again like this appends to it."""
LONG_RUN = ["sim.num_envs=8", "algo.rollout_steps=16", "algo.epochs=2", "runner.total_env_steps=3072",
            "runner.checkpoint_every=3", "runner.eval_envs=2", "runner.video=none", "runner.tensorboard=false",
            "out_dir=runs"]  # fmt: skip
"""The kill loop's run (24 iterations, a checkpoint every 3): the fixture "long" is it, uninterrupted."""
PARAMS = """
import hashlib, json, sys
from policyforge.algos import checkpoint
state = checkpoint.load(sys.argv[1])
h = hashlib.sha256()
for part in ("policy", "critic"):
    for key, value in sorted(state["algo"][part].items()):
        h.update(key.encode()); h.update(value.detach().cpu().contiguous().numpy().tobytes())
print(json.dumps({"params": h.hexdigest(), "env_steps": state["env_steps"]}))
"""
"""Prints a hash of the policy and critic parameters of a checkpoint file (read by the tree under test)."""


probe = registrar(PROBES)


# -- datasets: recovery never deletes data; damage is named ------------------------------------------------


def episode_rows(root: Path) -> list[dict]:
    import pyarrow.parquet as pq

    rows = []
    for path in sorted((root / "meta" / "episodes").glob("chunk-*/file-*.parquet")):  # not a writer's temp files
        rows += pq.read_table(path).to_pylist()
    return rows


def data_files(root: Path, rows: list[dict] | None = None) -> list[Path]:
    """The data files the episodes metadata lists (all of them with rows=None... of `rows`)."""
    info = read_json(root / "meta" / "info.json")
    rows = episode_rows(root) if rows is None else rows
    return [
        root / info["data_path"].format(chunk_index=r["data/chunk_index"], file_index=r["data/file_index"])
        for r in rows
    ]


def dataset_problems(root: Path) -> list[str]:
    """What is inconsistent in a dataset: info.json's totals against the committed episodes, listed data files
    missing, unreadable or of the wrong length, and data files no episode lists."""
    import numpy as np
    import pyarrow.parquet as pq

    try:
        info, rows = read_json(root / "meta" / "info.json"), episode_rows(root)
    except Exception as err:
        return [f"metadata unreadable: {type(err).__name__}: {err}"]
    problems = []
    if info.get("total_episodes") != len(rows):
        problems.append(f"info.json lists {info.get('total_episodes')} episodes, the metadata {len(rows)}")
    if info.get("total_frames") != sum(r["length"] for r in rows):
        problems.append(
            f"info.json lists {info.get('total_frames')} frames, the episodes {sum(r['length'] for r in rows)}"
        )
    for row, path in zip(rows, data_files(root, rows), strict=True):
        if not path.is_file():
            problems.append(f"{path.relative_to(root)} is missing")
            continue
        try:
            episodes = pq.read_table(path).column("episode_index").to_numpy()
        except Exception as err:
            problems.append(f"{path.relative_to(root)} unreadable ({type(err).__name__})")
            continue
        if np.count_nonzero(episodes == row["episode_index"]) != row["length"]:
            problems.append(f"{path.relative_to(root)} does not hold episode {row['episode_index']}'s frames")
    unlisted = set(root.glob("data/chunk-*/file-*.parquet")) - set(data_files(root, rows))
    problems += [f"{path.relative_to(root)} is listed by no episode" for path in sorted(unlisted)]
    return problems


def _appended(ctx: Ctx, root: Path, done, names: tuple[str, ...], expected_episodes: int | None = None) -> Verdict:
    """The verdict on a collect into a damaged dataset: a refusal naming the damage, or a consistent result."""
    if done.returncode != 0:
        return refused(done, *names)
    problems = dataset_problems(root)
    if problems:
        return Verdict("silent", "exit 0, but " + "; ".join(problems[:2]))
    count = len(episode_rows(root))
    if expected_episodes is not None and count != expected_episodes:
        return Verdict("silent", f"exit 0, the dataset holds {count} episodes, not {expected_episodes}")
    return Verdict("held", f"dataset consistent ({count} episodes), nothing lost")


@probe("meta/episodes deleted, then collect --out it", "dataset", "clear_error or held", needs=("dataset",))
def _episodes_meta_deleted(ctx: Ctx) -> Verdict:
    root = ctx.copy("dataset", "data/reach")
    ctx.protect(root / "data")
    shutil.rmtree(root / "meta" / "episodes")
    done = ctx.cli(*REACH, "--episodes", "2", "--out", root)
    return _appended(ctx, root, done, ("meta/episodes", "episodes"), expected_episodes=8)


@probe("a data file truncated, then collect --out it", "dataset", "clear_error", needs=("dataset",))
def _truncated_then_collect(ctx: Ctx) -> Verdict:
    root = ctx.copy("dataset", "data/reach")
    files = data_files(root)
    ctx.protect(*files[:-1])
    files[-1].write_bytes(files[-1].read_bytes()[:200])
    done = ctx.cli(*REACH, "--episodes", "2", "--out", root)
    return _appended(ctx, root, done, (files[-1].name, "data/chunk"))


@probe("a listed data file deleted, then collect --out it", "dataset", "clear_error", needs=("dataset",))
def _deleted_then_collect(ctx: Ctx) -> Verdict:
    root = ctx.copy("dataset", "data/reach")
    files = data_files(root)
    ctx.protect(*files[:2], *files[3:])
    files[2].unlink()
    done = ctx.cli(*REACH, "--episodes", "2", "--out", root)
    return _appended(ctx, root, done, (files[2].name, "data/chunk"))


@probe("info.json torn, then collect --out it", "dataset", "clear_error", needs=("dataset",))
def _info_torn(ctx: Ctx) -> Verdict:
    root = ctx.copy("dataset", "data/reach")
    ctx.protect(root / "data", root / "meta" / "episodes")
    info = root / "meta" / "info.json"
    info.write_text(info.read_text()[:100])
    return refused(ctx.cli(*REACH, "--episodes", "2", "--out", root), "info.json")


@probe("a user's copy of a data file in data/, then collect --out it", "dataset", "held", needs=("dataset",))
def _user_copy(ctx: Ctx) -> Verdict:
    root = ctx.copy("dataset", "data/reach")
    ctx.protect(root / "data")
    copy = data_files(root)[0].with_name("file-000 (copy).parquet")
    shutil.copy2(data_files(root)[0], copy)
    ctx.protect(copy)
    done = ctx.cli(*REACH, "--episodes", "2", "--out", root)
    if done.returncode != 0:
        return refused(done, copy.name)
    return Verdict("held", "appended; the user's copy is untouched")


BC = ["sim.task=arm-reach", "algo.gradient_steps=20", "algo.steps_per_iteration=10", "algo.warmup_steps=2",
      "algo.batch_size=8", "policy.denoiser.hidden=[32,32]", "policy.steps=2", "runner.eval_envs=1",
      "runner.eval_every_steps=0", "runner.video=none", "runner.video_camera=null", "runner.tensorboard=false",
      "out_dir=runs", "name=bc"]  # fmt: skip
"""A few gradient steps of flow BC on the arm-reach dataset fixture."""


def _bc(ctx: Ctx, dataset: str):
    return ctx.cli("train", recipe(ctx, "arm-lift-cube-flow-bc.yaml"), *BC, f"algo.dataset={dataset}")


@probe("a data file truncated, then BC", "dataset", "clear_error", needs=("dataset",))
def _truncated_then_bc(ctx: Ctx) -> Verdict:
    root = ctx.copy("dataset", "data/reach")
    damaged = data_files(root)[3]
    damaged.write_bytes(damaged.read_bytes()[:200])
    done = _bc(ctx, "data/reach")
    if done.returncode == 0 and done.names(damaged.name):
        return Verdict("held", "trained on the intact episodes, naming the damaged file")
    if done.returncode == 0:
        return Verdict("silent", "trained on it without a word about the damaged file")
    return refused(done, damaged.name)


@probe("a listed data file deleted, then BC", "dataset", "clear_error", needs=("dataset",))
def _deleted_then_bc(ctx: Ctx) -> Verdict:
    root = ctx.copy("dataset", "data/reach")
    missing = data_files(root)[2]
    missing.unlink()
    return refused(_bc(ctx, "data/reach"), missing.name)


EMPTY_DATASET = """
import sys
from policyforge.data.dataset import DemoWriter
DemoWriter(sys.argv[1], 10, 28, 5, task_name="arm-reach", info_extra={"task_options": {}}, robot_type="panda")
"""


@probe("BC on a dataset with no episodes", "dataset", "clear_error")
def _empty_bc(ctx: Ctx) -> Verdict:
    made = ctx.python(EMPTY_DATASET, ctx.work / "data" / "empty")
    if made.returncode != 0:
        return Verdict(
            "traceback" if made.traceback else "silent", f"could not write an empty dataset: {made.last_line()}"
        )
    return refused(_bc(ctx, "data/empty"), "data/empty", "algo.dataset")


# -- SIGKILL loops ----------------------------------------------------------------------------------------


def params(ctx: Ctx, checkpoint: Path) -> dict:
    done = ctx.python(PARAMS, checkpoint, timeout=120)
    lines = [line for line in done.output.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if done.returncode == 0 and lines else {"error": done.last_line()}


def _records(run: Path) -> int:
    return sum(1 for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip())


@probe("SIGKILL training 6× at random moments, then --resume", "kill", "held", needs=("long",))
def _kill_training(ctx: Ctx, kills: int = 6, seed: int = 18) -> Verdict:
    rng, run = random.Random(seed), ctx.work / "runs" / "killed"
    metrics = run / "metrics.jsonl"
    size = lambda: metrics.stat().st_size if metrics.exists() else -1  # noqa: E731
    process = ctx.start("train", recipe(ctx, "pendulum-swingup-ppo.yaml"), *LONG_RUN, "name=killed")
    killed = kill_after(process, rng.uniform(0, 1.0), until=lambda: any(run.glob("checkpoints/step_*.pt")))
    last, count = ctx.collect(process), int(killed)
    while killed and count < kills:
        before = size()
        process = ctx.start("train", "--resume", run)
        if count % 2:  # while it trains (its metrics grow) ...
            killed = kill_after(process, rng.uniform(0, 1.0), until=lambda before=before: size() != before)
        else:  # ... or at any moment from its start (loading included)
            killed = kill_after(process, rng.uniform(0.2, 6.0))
        last, count = ctx.collect(process), count + killed
    if killed:
        last = ctx.cli("train", "--resume", run)
    if last.returncode != 0:
        if last.returncode is None or last.traceback:
            return refused(last, "checkpoint")
        return Verdict("data_loss", f"after {count} kills the run cannot be resumed: {last.last_line()}")
    reference = ctx.fixtures["long"]
    whole, resumed = (
        params(ctx, reference / "checkpoints" / "latest.pt"),
        params(ctx, run / "checkpoints" / "latest.pt"),
    )
    if "error" in resumed or whole != resumed:
        return Verdict("silent", f"after {count} kills the final parameters differ from an uninterrupted run's")
    if _records(run) != _records(reference):
        return Verdict(
            "silent", f"metrics.jsonl has {_records(run)} records, an uninterrupted run {_records(reference)}"
        )
    return Verdict("held", f"{count} SIGKILLs, then resumed: parameters bit-exact, no duplicated log lines")


@probe("SIGKILL collect 5× at random moments, then reopen", "kill", "held")
def _kill_collect(ctx: Ctx, kills: int = 5, seed: int = 18) -> Verdict:
    rng, root = random.Random(seed), ctx.work / "data" / "killed"
    written = lambda: len(list(root.glob("data/chunk-*/file-*.parquet")))  # noqa: E731
    for _ in range(kills):  # each kill comes while episodes are being written
        before = written()
        process = ctx.start(*REACH, "--episodes", "400", "--out", root)
        kill_after(process, rng.uniform(0, 1.5), until=lambda before=before: written() > before)
        ctx.collect(process)
        if (root / "meta" / "episodes").exists():
            ctx.protect(*data_files(root))  # committed episodes must survive every later kill and the reopen
    committed = len(episode_rows(root)) if (root / "meta" / "episodes").exists() else 0
    done = ctx.cli(*REACH, "--episodes", "2", "--out", root)
    verdict = _appended(ctx, root, done, ("data/killed",), expected_episodes=committed + 2)
    if verdict.cls != "held":
        return verdict
    return Verdict("held", f"{kills} SIGKILLs ({committed} episodes committed), reopened: consistent, nothing lost")


# -- a full disk: a file-size limit (RLIMIT_FSIZE) ----------------------------------------------------------

WRITE_FAILED = ("file-size", "file size", "disk", "space", "too large")


def _resume_under_limit(limit: int, ctx: Ctx) -> Verdict:
    run = ctx.copy("run", "runs/tiny")
    before = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    first = ctx.cli("train", "--resume", run, LONGER, fsize=limit)
    verdict = refused(first, *WRITE_FAILED)
    if verdict.cls != "clear_error":
        return verdict
    again = ctx.cli("train", "--resume", run, LONGER)
    if again.returncode != 0:
        return refused(again, "metrics.jsonl", "checkpoint")  # a clear error at best: the advised resume fails
    after = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    if after[: len(before)] != before:
        return Verdict("data_loss", "metrics.jsonl lost records written before the full disk")
    return Verdict("held", "refused naming the full disk; the advised --resume then trained to the end")


for _limit, _what in ((2000, "metrics.jsonl"), (1_000_000, "a checkpoint")):
    _name = f"file-size limit below {_what} during --resume, then --resume"
    PROBES.append(variant(_name, "disk full", "held", _resume_under_limit, _limit, needs=["run"]))


@probe("file-size limit below a checkpoint while training a new run, then --resume", "disk full", "held")
def _train_under_limit(ctx: Ctx) -> Verdict:
    args = [recipe(ctx, "pendulum-swingup-ppo.yaml"), *LONG_RUN, "runner.total_env_steps=1024", "name=full"]
    verdict = refused(ctx.cli("train", *args, fsize=1_000_000), *WRITE_FAILED)
    if verdict.cls != "clear_error":
        return verdict
    again = ctx.cli("train", "--resume", "runs/full")
    if again.returncode == 0:
        return Verdict("held", "refused naming the full disk; the advised --resume then trained the run")
    restart = ctx.cli("train", *args)
    if restart.returncode == 0:
        return Verdict("held", "refused naming the full disk; --resume said why not, and training anew worked")
    return Verdict("silent", f"stranded: --resume says “{again.last_line(70)}”, train says “{restart.last_line(70)}”")


def _collect_under_limit(append: bool, ctx: Ctx) -> Verdict:
    root = ctx.copy("dataset", "data/reach") if append else ctx.work / "data" / "reach"
    committed = episode_rows(root) if append else []
    if append:
        ctx.protect(root / "data")  # meta/episodes is rewritten by every commit: its rows are compared instead
    first = ctx.cli(*REACH, "--episodes", "4", "--out", root, fsize=6000)
    verdict = refused(first, *WRITE_FAILED)
    if verdict.cls != "clear_error":
        return verdict
    done = ctx.cli(*REACH, "--episodes", "2", "--out", root)
    verdict = _appended(ctx, root, done, ("data/reach",))
    if verdict.cls == "held" and episode_rows(root)[: len(committed)] != committed:
        return Verdict("data_loss", "the episodes committed before the full disk are not all listed as they were")
    return verdict


for _append in (False, True):
    _name = f"file-size limit while collecting {'into a dataset' if _append else 'a new dataset'}, then again"
    PROBES.append(variant(_name, "disk full", "held", _collect_under_limit, _append, needs=["dataset"] * _append))
