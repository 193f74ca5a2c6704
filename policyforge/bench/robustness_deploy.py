"""Probes of `robustness.py`, part 3: deploy against the simulated Go2 — bad flags, hostile policies (NaN
and huge weights, the wrong observation size, a stale export), a robot reporting +inf — and the export checks that
should stop such policies first.

The bench starts the Go2 peer itself and waits until it publishes, then deploys to it as to a robot on the network
(`--interface lo --domain-id D`): on a loaded machine `--peer sim` can fail to connect before the peer is up, which
would hide what a probe asks. The peer's own audit counts unsafe commands that reached its motors.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from policyforge.bench.robustness_kit import Ctx, Probe, Run, Verdict, digest, read_json, refused, registrar, variant

PROBES: list[Probe] = []
GO2_POLICY = "tests/real_robot/assets/quadruped-walk-policy.onnx"
"""The shipped Go2 walking policy (an export of a quadruped-walk PPO run), relative to the tree."""
PEER = """
import sys
import numpy as np
from policyforge.real_robot.peers import go2_sim
inf_after = float(sys.argv[1])
if inf_after >= 0:  # a failing IMU: +inf as the gyro's x rate from this simulated time on
    sensor = go2_sim.SimulatedGo2.sensor
    def hostile(self, name):
        value = sensor(self, name)
        return np.array([np.inf, *value[1:]]) if name == "gyro" and self.data.time > inf_after else value
    go2_sim.SimulatedGo2.sensor = hostile
go2_sim.main(sys.argv[2:])
"""
"""The tree's simulated Go2 peer, optionally with a failing IMU."""


probe = registrar(PROBES)


class Go2Peer:
    """A simulated Go2 the bench runs: `flags` reach it; `unsafe()` is its count of unsafe commands."""

    def __init__(self, domain: int, stats: Path):
        self.flags = ["--robot", "go2", "--interface", "lo", "--domain-id", str(domain)]
        self.stats = stats

    def unsafe(self) -> int | None:
        return sum(read_json(self.stats)["unsafe"].values()) if self.stats.is_file() else None


@contextlib.contextmanager
def go2_peer(ctx: Ctx, inf_after: float = -1.0) -> Iterator[Go2Peer]:
    """Run the peer while inside (ready: it has written its first facts); stopped on leaving (final facts)."""
    domain = random.SystemRandom().randint(100, 230)
    peer = Go2Peer(domain, ctx.root / f"go2-peer-{domain}.json")
    process = ctx.popen(
        [sys.executable, "-c", PEER, str(inf_after), "--domain-id", str(domain), "--stats", str(peer.stats)]
    )
    deadline = time.monotonic() + ctx.timeout
    while not peer.stats.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        if not peer.stats.exists():
            raise RuntimeError(f"the Go2 peer did not start: {(process.communicate(timeout=5)[0] or '')[-300:]}")
        yield peer
    finally:
        process.terminate()
        try:
            process.communicate(timeout=30)
        except Exception:
            process.kill()
            process.communicate()


def deploy(ctx: Ctx, source: Path | str, *flags: str, inf_after: float = -1.0) -> tuple[Run, int | None]:
    """`policyforge deploy SOURCE` to a bench-run Go2 peer: (the run, unsafe commands the peer counted)."""
    with go2_peer(ctx, inf_after) as peer:
        done = ctx.cli("deploy", source, *peer.flags, *flags, timeout=150)
    return done, peer.unsafe()


def final_mode(done: Run) -> str:
    """Deploy's last words: its final mode and the safety interventions, from its table."""
    found = {
        key: re.search(rf"{key}\s*│\s*([^│]+?)\s*│", done.output) for key in ("final mode", "safety interventions")
    }
    return ", ".join(f"{key} {match[1]}" for key, match in found.items() if match) or "no report"


def _bad_flag(flag: str, value: str, ctx: Ctx) -> Verdict:
    return refused(deploy(ctx, ctx.tree / GO2_POLICY, "--seconds", "1", flag, value)[0], flag)


for _flag, _value in (("--seconds", "-1"), ("--seconds", "nan"), ("--command", "nan,0,0")):
    PROBES.append(variant(f"deploy {_flag} {_value}", "cli", "clear_error", _bad_flag, _flag, _value))


def hostile_export(ctx: Ctx, how: str) -> Path:
    """The shipped Go2 policy with its weights set to NaN ("nan"), multiplied by 1e6 ("huge"), or taking 48
    observations instead of the robot's 45 ("obs48"), with its JSON description."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    source = ctx.tree / GO2_POLICY
    model, spec = onnx.load(source), read_json(source.with_suffix(".json"))
    obs_dim = spec["obs_dim"]
    for tensor in model.graph.initializer:
        value = numpy_helper.to_array(tensor).astype(np.float32) if tensor.data_type == 1 else None
        if value is None:
            continue
        if how == "nan" and tensor.name.endswith("weight"):
            value = np.full_like(value, np.nan)
        elif how == "huge" and tensor.name.endswith("weight"):
            value = value * 1e6
        elif how == "obs48" and value.ndim and value.shape[-1] == obs_dim:
            value = np.concatenate([value, np.ones((*value.shape[:-1], 3), np.float32)], axis=-1)
        tensor.CopyFrom(numpy_helper.from_array(value, tensor.name))
    if how == "obs48":
        model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = obs_dim + 3
        spec |= {"obs_dim": obs_dim + 3, "inputs": {"obs": [obs_dim + 3]}}
    out = ctx.work / "exports" / f"{how}.onnx"
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, out)
    out.with_suffix(".json").write_text(json.dumps(spec))
    return out


def _deploy_hostile(how: str, ctx: Ctx) -> Verdict:
    policy = hostile_export(ctx, how)
    done, unsafe = deploy(ctx, policy, "--seconds", "2")
    if unsafe:
        return Verdict("silent", f"{unsafe} unsafe commands reached the motors (exit {done.returncode})")
    if done.returncode == 0 and how == "huge" and done.names("±1 limits") and not done.traceback:
        # finite, in-range, bang-bang actions: the filter clamps them (0 unsafe) and the run says how saturated
        return Verdict("held", f"0 unsafe commands, saturation named ({final_mode(done)})")
    if done.returncode == 0:
        return Verdict("silent", f"exit 0 ({final_mode(done)}): the run does not say it failed")
    if done.returncode == 3 and not done.traceback:
        return Verdict("held", "e-stopped, exit 3, nothing unsafe reached the motors")
    return refused(done, policy.name, "nan", "finite", "weights", "saturat")


for _how, _what in (("nan", "NaN weights"), ("huge", "×1e6 weights")):
    PROBES.append(variant(f"deploy an export with {_what}", "deploy", "clear_error or held", _deploy_hostile, _how))


@probe("deploy random bytes as an export", "deploy", "clear_error")
def _deploy_garbage(ctx: Ctx) -> Verdict:
    garbage = ctx.work / "exports" / "garbage.onnx"
    garbage.parent.mkdir(parents=True, exist_ok=True)
    garbage.write_bytes(random.Random(18).randbytes(4096))
    shutil.copy((ctx.tree / GO2_POLICY).with_suffix(".json"), garbage.with_suffix(".json"))
    done, unsafe = deploy(ctx, garbage, "--seconds", "2")
    return Verdict("silent", f"{unsafe} unsafe commands") if unsafe else refused(done, "garbage.onnx")


@probe("deploy an export of 48 observations on the 45-observation Go2", "deploy", "clear_error")
def _deploy_mismatch(ctx: Ctx) -> Verdict:
    done, _ = deploy(ctx, hostile_export(ctx, "obs48"), "--seconds", "2")
    verdict = refused(done, "48", "observation size")
    if verdict.cls == "clear_error" and "ticks / policy steps" in done.output:
        return Verdict("silent", "refused only after connecting to the robot and e-stopping it")
    return verdict


@probe("deploy against a Go2 whose IMU reports +inf", "deploy", "clear_error or held")
def _inf_observation(ctx: Ctx) -> Verdict:
    done, unsafe = deploy(ctx, ctx.tree / GO2_POLICY, "--seconds", "2", inf_after=0.5)
    if unsafe:
        return Verdict("silent", f"{unsafe} unsafe commands reached the motors (exit {done.returncode})")
    if done.returncode == 0:
        return Verdict("silent", "exit 0: the policy ran on +inf observations without a word")
    if done.returncode == 3 and done.names("inf", "finite", "observation", "gyro") and not done.traceback:
        return Verdict("held", "e-stopped naming the non-finite observation, exit 3")
    return refused(done, "inf", "finite", "observation", "gyro")


POISON = """
import sys
from pathlib import Path
from policyforge.algos import checkpoint
for path in sorted(Path(sys.argv[1]).glob("checkpoints/*.pt")):
    state = checkpoint.read(path)
    for key, value in state["algo"]["policy"].items():
        if key.startswith("net.") and key.endswith("weight"):
            value.fill_(float("nan")) if sys.argv[2] == "nan" else value.mul_(1e6)
    checkpoint.write(path, state)
"""
"""Rewrites every checkpoint of a run with its policy's weights NaN or ×1e6 (with the tree's own writer)."""


def _export_poisoned(how: str, ctx: Ctx) -> Verdict:
    run = ctx.copy("run", "runs/tiny")
    made = ctx.python(POISON, run, how)
    if made.returncode != 0:
        return Verdict(
            "traceback" if made.traceback else "silent", f"could not write the checkpoint: {made.last_line()}"
        )
    done = ctx.cli("export", run, "--format", "onnx")
    exported = run / "export" / "policy.onnx"
    if done.returncode == 0 and how == "huge" and done.names("±1 limits") and not done.traceback:
        return Verdict("held", "exported (faithful: finite, in-range actions) with a warning naming the saturation")
    if done.returncode == 0:
        return Verdict("silent", f"exported ({done.last_line(60)})")
    verdict = refused(done, "nan", "finite", "weights", "saturat", "latest.pt")
    if verdict.cls == "clear_error" and exported.exists():
        return Verdict("silent", f"refused, but left {exported.relative_to(run)} behind for deploy to pick up")
    return verdict


for _how, _what in (("nan", "NaN weights"), ("huge", "×1e6 weights")):
    _name = f"export a checkpoint with {_what}"
    expected = "clear_error" if _how == "nan" else "clear_error or held"
    PROBES.append(variant(_name, "deploy", expected, _export_poisoned, _how, needs=["run"]))


@probe("deploy a run whose checkpoint is newer than its export", "deploy", "held", needs=("quad",))
def _stale_export(ctx: Ctx) -> Verdict:
    run = ctx.copy("quad", "runs/quad")
    exported = run / "export" / "policy.onnx"
    old = digest(exported)
    longer = ctx.cli("train", "--resume", run, "runner.total_env_steps=128")
    if longer.returncode != 0:
        return refused(longer, "quad")
    done, _ = deploy(ctx, run, "--seconds", "1")
    if digest(exported) != old:  # re-exported: then it should run like any deploy (0, or 3 after an e-stop)
        return Verdict("held", "re-exported, then deployed") if done.returncode in (0, 3) else refused(done, "export")
    if done.returncode != 0 and done.names("stale", "older than"):
        return refused(done, "stale", "older than")
    return Verdict("silent", f"used the stale export without a word ({done.summary()})")
