"""Probes of `bench/robustness.py`, part 3: hostile policies and observations on deploy against the simulated Go2
(NaN and huge weights, a policy of the wrong observation size, a stale export, a robot reporting +inf), and the
export checks that should stop such policies first."""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

from robustness_kit import Ctx, Probe, Verdict, digest, read_json, refused, variant
from robustness_probes import GO2_POLICY

PROBES: list[Probe] = []


def probe(name: str, group: str, expected: str, needs: tuple[str, ...] = ()):
    def register(run):
        PROBES.append(Probe(name, group, expected, run, needs))
        return run

    return register


# -- deploy: hostile policies and observations on the simulated Go2 ----------------------------------------


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


def peer_report(done) -> tuple[int | None, str]:
    """(unsafe commands the peer counted, final mode) from deploy's table."""
    unsafe = re.search(r"peer: unsafe commands\s*│\s*(\d+)", done.output)
    mode = re.search(r"final mode\s*│\s*(\w+)", done.output)
    return (int(unsafe[1]) if unsafe else None), (mode[1] if mode else "?")


def _deploy_hostile(how: str, ctx: Ctx) -> Verdict:
    policy = hostile_export(ctx, how)
    done = ctx.cli("deploy", policy, "--robot", "go2", "--peer", "sim", "--seconds", "2", timeout=120)
    unsafe, mode = peer_report(done)
    if unsafe:
        return Verdict("silent", f"{unsafe} unsafe commands reached the motors (exit {done.returncode})")
    if done.returncode == 0:
        return Verdict("silent", f"exit 0, final mode {mode}: the run does not say it failed")
    if done.returncode == 3 and not done.traceback:
        return Verdict("held", "e-stopped, exit 3, nothing unsafe reached the motors")
    return refused(done, policy.name, "nan", "finite", "weights", "saturat")


for _how, _what in (("nan", "NaN weights"), ("huge", "×1e6 weights")):
    PROBES.append(variant(f"deploy an export with {_what}", "deploy", "clear_error or held", _deploy_hostile, _how))


@probe("deploy an export of 48 observations on the 45-observation Go2", "deploy", "clear_error")
def _deploy_mismatch(ctx: Ctx) -> Verdict:
    done = ctx.cli(
        "deploy", hostile_export(ctx, "obs48"), "--robot", "go2", "--peer", "sim", "--seconds", "2", timeout=120
    )
    verdict = refused(done, "48", "observation size")
    if verdict.cls == "clear_error" and "ticks / policy steps" in done.output:
        return Verdict("silent", "refused only after connecting to the robot and e-stopping it")
    return verdict


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
    if done.returncode == 0:
        return Verdict("silent", f"exported ({done.last_line(60)})")
    verdict = refused(done, "nan", "finite", "weights", "saturat", "latest.pt")
    if verdict.cls == "clear_error" and exported.exists():
        return Verdict("silent", f"refused, but left {exported.relative_to(run)} behind for deploy to pick up")
    return verdict


for _how, _what in (("nan", "NaN weights"), ("huge", "×1e6 weights")):
    _name = f"export a checkpoint with {_what}"
    PROBES.append(variant(_name, "deploy", "clear_error", _export_poisoned, _how, needs=["run"]))


@probe("deploy a run whose checkpoint is newer than its export", "deploy", "held", needs=("quad",))
def _stale_export(ctx: Ctx) -> Verdict:
    run = ctx.copy("quad", "runs/quad")
    exported = run / "export" / "policy.onnx"
    old = digest(exported)
    longer = ctx.cli("train", "--resume", run, "runner.total_env_steps=128")
    if longer.returncode != 0:
        return refused(longer, "quad")
    done = ctx.cli("deploy", run, "--robot", "go2", "--peer", "sim", "--seconds", "1", timeout=150)
    if digest(exported) != old:  # re-exported: then it should run like any deploy (0, or 3 after an e-stop)
        return Verdict("held", "re-exported, then deployed") if done.returncode in (0, 3) else refused(done, "export")
    if done.returncode != 0 and done.names("stale", "older than"):
        return refused(done, "stale", "older than")
    return Verdict("silent", f"used the stale export without a word ({done.summary()})")


HOSTILE_PEER = """
import sys
import numpy as np
from policyforge.real_robot.peers import go2_sim
sensor = go2_sim.SimulatedGo2.sensor
def hostile(self, name):
    value = sensor(self, name)
    return np.array([np.inf, *value[1:]]) if name == "gyro" and self.data.time > float(sys.argv[1]) else value
go2_sim.SimulatedGo2.sensor = hostile
go2_sim.main(sys.argv[2:])
"""
"""The simulated Go2 peer reporting +inf as its gyro's x rate from a simulated time on (a failing IMU)."""


@probe("deploy against a Go2 whose IMU reports +inf", "deploy", "clear_error or held")
def _inf_observation(ctx: Ctx) -> Verdict:
    domain = str(random.SystemRandom().randint(100, 230))
    peer_args = ["--domain-id", domain, "--stats", ctx.root / "peer.json"]
    peer = ctx.popen([sys.executable, "-c", HOSTILE_PEER, "0.5", *map(str, peer_args)])
    try:
        policy = ctx.tree / GO2_POLICY
        go2 = ["--robot", "go2", "--interface", "lo", "--domain-id", domain]
        done = ctx.cli("deploy", policy, *go2, "--seconds", "2", timeout=120)
    finally:
        peer.terminate()
        peer.communicate(timeout=30)
    if done.returncode == 0:
        return Verdict("silent", "exit 0: the policy ran on +inf observations without a word")
    if done.returncode == 3 and done.names("inf", "finite", "observation", "gyro") and not done.traceback:
        return Verdict("held", "e-stopped naming the non-finite observation, exit 3")
    return refused(done, "inf", "finite", "observation", "gyro")
