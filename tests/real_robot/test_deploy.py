"""`policyforge deploy` end to end on the simulated peers (each starts and stops its own peer), and what it
refuses: exports that do not fit the robot, bad flags, non-finite observations; a policy that raises or an e-stop
is named as the cause, and the CLI exits 3 after an e-stop."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from policyforge.cli import ESTOP_EXIT, main
from policyforge.policies.export import export, file_sha256
from policyforge.policies.export_description import description_path
from policyforge.real_robot.deploy import DeployError, ExportedPolicy, NonFiniteObservation, QuadrupedAdapter
from policyforge.real_robot.go2 import Go2, Go2Config
from policyforge.real_robot.launch import DeployConfig, deploy, resolve_policy
from policyforge.real_robot.loop import ControlLoop, LoopConfig
from policyforge.real_robot.peers.go2_sim import FACTS_PERIOD_S
from policyforge.real_robot.peers.process import free_domain_id, simulated_peer
from policyforge.real_robot.safety import SafetyFilter
from policyforge.sims.tasks.quadruped import QuadrupedConfig
from tests.real_robot.conftest import ASSETS, GO2_POLICY

GO2_STUDENT = ASSETS / "quadruped-walk-student.onnx"
"""The row-c student of bench sim2sim-table (configs/quadruped-walk-sim2real-student.yaml, 2M env steps of DAgger
from a 10M-step critic-observation teacher), exported to ONNX."""


def test_a_proprioceptive_history_student_walks_the_go2_peer():
    """The teacher→student policy of configs/quadruped-walk-sim2real-student.yaml reads its last 15 observations;
    deploy keeps that history, and the student walks at the command on the peer (measured 0.04 m/s error)."""
    config = DeployConfig(source=GO2_STUDENT, robot="go2", peer="sim", seconds=5.0, velocity_command=(0.5, 0.0, 0.0))
    done = deploy(config, say=lambda line: None)
    assert ExportedPolicy(GO2_STUDENT).history_len == 15
    assert done.report.final_mode == "normal"
    assert done.verdict.error is not None and done.verdict.error < 0.25, done.verdict.line


@pytest.mark.parametrize("wire", [[], ["--simulator-bridge"]], ids=["robot", "simulator-bridge"])
def test_deploy_walks_the_go2_peer_and_records_the_episode(tmp_path, capsys, wire):
    """As a robot sends its states, and as a simulator bridge does (crc 0, tick 0, zeros first): the driver
    stamps those on arrival, so the walk and its verdict are the same."""
    out = tmp_path / "episodes"
    flags = ["--robot", "go2", "--peer", "sim", "--seconds", "3", "--record", str(out), *wire]
    code = main(["deploy", str(GO2_POLICY), *flags])
    printed = " ".join(capsys.readouterr().out.split())
    assert code == 0 and "final mode" in printed
    assert "command: vx 0.5 m/s, vy 0 m/s, yaw rate 0 rad/s" in printed.split("connecting to the go2")[0]
    # the verdict's velocity (base position over the peer's clock) agrees with how far the peer says it moved in
    # the policy's time on that clock (on a loaded machine the peer simulates less than the 3 s of wall time)
    verdict = re.search(r"VERDICT: tracked ([-\d.]+), ([-\d.]+) m/s, ([-\d.]+) rad/s against the command", printed)
    robot_seconds = re.search(r"measured over ([\d.]+) s of the peer's simulated time", printed)
    moved = re.search(r"base moved \(x, y\) │ ([-\d.]+), ([-\d.]+) m", printed)
    assert verdict and moved and robot_seconds, printed
    latency = re.search(r"action latency │ median ([\d.]+) / p99 ([\d.]+) ms", printed)
    assert latency and 0 < float(latency[1]) <= float(latency[2]), printed  # measured, for sim.corruption
    # each mark reads a facts snapshot up to one write period old, and a peer that fell behind at the first mark
    # catches up in a burst during the phase (measured 3.26 s under load): the interval can exceed the 3 s policy
    # phase by its backlog, but not by the stand-up phase before it
    assert 0 < float(robot_seconds[1]) <= 3.0 + 5 * FACTS_PERIOD_S
    assert abs(float(verdict[1]) * float(robot_seconds[1]) - float(moved[1])) < 0.15, (verdict[0], moved[0])
    from policyforge.data.dataset import Demonstrations

    episodes = Demonstrations(out)
    # 3 s at 50 Hz = 150 policy steps; on a loaded machine some actions miss their time budget (not recorded)
    assert episodes.num_episodes == 1 and episodes.num_frames >= 90
    assert episodes.column("observation.state").shape[1] == 45


def test_deploy_realtime_runs_the_loop_under_the_real_time_options(capsys, peers_on_their_own_computer):
    """The peer gets the robot's own computer: on a loaded machine a SCHED_FIFO loop pinned to a CPU starved it
    (it simulated 0.01 s of the 1 s policy phase, stale states e-stopped the run; 2026-12-05)."""
    code = main(["deploy", str(GO2_POLICY), "--peer", "sim", "--seconds", "1", "--realtime", "--cpus", "0"])
    printed = " ".join(capsys.readouterr().out.split())
    assert code == 0, printed
    row = printed.split("real-time options │")[1].split("│")[0]
    assert "affinity" in row and "gc_frozen" in row, row
    if os.geteuid() == 0:  # root may use SCHED_FIFO and mlockall (elsewhere: one warning, normal scheduling)
        assert "sched_fifo" in row and "mlockall" in row, row


def test_deploy_reaches_with_the_franka_peer(peers_on_their_own_computer):
    config = DeployConfig(
        source=ASSETS / "arm-reach-policy.onnx", robot="franka", peer="sim", seconds=4.0, realtime=True
    )
    scheduling = (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority, os.sched_getaffinity(0))
    done = deploy(config)
    report, facts = done.report, done.facts
    # libfranka's synchronous stop on disconnect raised this thread to SCHED_FIFO 99 and left it there
    assert (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority, os.sched_getaffinity(0)) == scheduling
    # reaching is asserted in test_franka.py; where the arm ends is not: after reaching, some joint-mode runs
    # drift away from the goal (not diagnosed yet, README: deploy limits)
    assert report.final_mode == "normal" and report.policy_steps >= 90 and facts["goal_distance"] >= 0


def test_deploy_refuses_a_policy_of_another_task(capsys):
    code = main(["deploy", str(GO2_POLICY), "--robot", "franka", "--peer", "sim"])
    printed = " ".join(capsys.readouterr().out.split())
    assert code == 2 and "franka runs arm-reach, arm-instructed policies; this one is for 'quadruped-walk'" in printed


def constant_export(path: Path, value: float, obs_dim: int = 45, action_dim: int = 12, described_obs_dim=None) -> Path:
    """An exported quadruped-walk policy (ONNX + its description, `<file>.json`) whose action is `value` in every
    entry, whatever it observes; its description may claim another observation size (`described_obs_dim`) than
    the graph takes."""
    weights = numpy_helper.from_array(np.zeros((obs_dim, action_dim), np.float32), "weights")
    bias = numpy_helper.from_array(np.full(action_dim, value, np.float32), "bias")
    shape = numpy_helper.from_array(np.array([-1, 1, action_dim], np.int64), "shape")
    nodes = [
        helper.make_node("MatMul", ["obs", "weights"], ["product"]),
        helper.make_node("Add", ["product", "bias"], ["flat"]),
        helper.make_node("Reshape", ["flat", "shape"], ["action"]),
    ]
    inputs = [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", obs_dim])]
    outputs = [helper.make_tensor_value_info("action", TensorProto.FLOAT, ["batch", 1, action_dim])]
    graph = helper.make_graph(nodes, "constant", inputs, outputs, [weights, bias, shape])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    described = described_obs_dim or obs_dim
    spec = {"obs_key": "policy", "action_dim": action_dim, "chunk_len": 1, "format": "onnx", "obs_dim": described}
    spec |= {"inputs": {"obs": [described]}, "task": "quadruped-walk", "control_dt": 0.02, "task_options": {}}
    description_path(path).write_text(json.dumps(spec))
    return path


def test_an_estop_exits_with_status_3_and_names_its_cause(tmp_path, capsys):
    huge = constant_export(tmp_path / "huge.onnx", 1e6)  # every action refused (action_range): no command
    code = main(["deploy", str(huge), "--robot", "go2", "--peer", "sim", "--seconds", "1.5"])
    printed = " ".join(capsys.readouterr().out.split())
    assert code == ESTOP_EXIT == 3, printed
    assert "e-stop: stale_command after " in printed  # the filter's fault, then what caused it:
    assert "action_range: the safety filter refused the policy's action" in printed
    assert "final mode" in printed and "estop" in printed


@pytest.mark.parametrize("described", [28, None], ids=["description-says-28", "graph-takes-28"])
def test_an_export_of_another_observation_size_is_refused_before_connecting(tmp_path, capsys, described):
    wrong = constant_export(tmp_path / "wrong.onnx", 0.0, obs_dim=28, described_obs_dim=described or 45)
    started = time.monotonic()
    code = main(["deploy", str(wrong), "--robot", "go2", "--peer", "sim"])
    printed = " ".join(capsys.readouterr().out.split())
    assert code == 2 and str(wrong) in printed, printed
    if described:
        assert "takes observations of size 28, but the go2 adapter builds observations of size 45" in printed
    else:  # the description lies: running the graph once on the adapter's size shows it
        assert "fails on an observation of size 45" in printed
        assert "wrong.onnx: input 'obs' must be [B, 28] float32 (B ≥ 1), got [1, 45] float32" in printed
    assert time.monotonic() - started < 30  # no peer started, no robot connected, no 10 s run


def test_an_export_of_another_action_size_is_refused(tmp_path, capsys):
    wrong = constant_export(tmp_path / "wrong.onnx", 0.0, action_dim=5)
    assert main(["deploy", str(wrong), "--robot", "go2", "--peer", "sim"]) == 2
    printed = " ".join(capsys.readouterr().out.split())
    assert "answers actions of size 5, but the go2 adapter applies actions of size 12" in printed


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--seconds", "-1"], "--seconds: must be a finite number of seconds > 0, got -1.0"),
        (["--seconds", "0"], "--seconds: must be a finite number"),
        (["--seconds", "inf"], "--seconds: must be a finite number"),
        (["--seconds", "nan"], "--seconds: must be a finite number"),
        (["--domain-id", "233"], "--domain-id: must be a DDS domain id in [0, 232]"),
        (["--domain-id", "-1"], "--domain-id: must be a DDS domain id in [0, 232]"),
        (["--command", "nan,0,0"], "--command: must be three finite numbers"),
        (["--command", "inf,0,0"], "--command: must be three finite numbers"),
        (["--command", "5,0,0"], "--command: vx=5 is outside the range the policy was trained on, [-0.5, 1]"),
        (["--command", "0,0,-3"], "--command: yaw_rate=-3 is outside the range the policy was trained on"),
        (["--interface", "eth0; rm -rf /"], "--interface: must be a network interface name"),
        (["--goal", "0.5,nan,0.3"], "--goal: must be three finite numbers"),
        (["--cpus", "4096"], "--cpus: must name CPUs among 0.."),
        (["--cpus", "one"], "--cpus: give CPU numbers separated by commas"),
    ],
)
def test_bad_deploy_flags_are_refused_naming_the_flag(flags, message, capsys):
    assert main(["deploy", str(GO2_POLICY), "--peer", "sim", *flags]) == 2
    assert message in " ".join(capsys.readouterr().out.split())


def test_hardware_flags_are_checked_before_connecting(capsys):
    assert main(["deploy", str(GO2_POLICY), "--interface", "nosuch0"]) == 2
    assert "--interface: no 'nosuch0' here; have [" in " ".join(capsys.readouterr().out.split())
    assert main(["deploy", str(ASSETS / "arm-reach-policy.onnx"), "--robot", "franka", "--goal", "0.5,0,2"]) == 2
    assert "--goal: (0.5, 0.0, 2.0) is outside the franka workspace box" in " ".join(capsys.readouterr().out.split())
    assert main(["deploy", str(GO2_POLICY), "--simulator-bridge", "--interface", "eth0"]) == 2
    assert "--simulator-bridge: only on the loopback ('lo')" in " ".join(capsys.readouterr().out.split())
    arm = str(ASSETS / "arm-reach-policy.onnx")
    assert main(["deploy", arm, "--robot", "franka", "--peer", "sim", "--simulator-bridge"]) == 2
    assert "--simulator-bridge: Go2 only" in " ".join(capsys.readouterr().out.split())


class InfAfter:
    """The Go2's task adapter, except that after `after` observations one entry reads +inf (a broken sensor)."""

    def __init__(self, after: int):
        self.adapter, self.after, self.count = QuadrupedAdapter(QuadrupedConfig()), after, 0

    def __getattr__(self, name):
        return getattr(self.adapter, name)

    def observation(self, state, last_action):
        obs, self.count = self.adapter.observation(state, last_action), self.count + 1
        if self.count > self.after:
            obs = obs.copy()
            obs[0] = np.inf
        return obs


def test_a_non_finite_observation_never_reaches_the_policy(go2_peer):
    exported = ExportedPolicy(GO2_POLICY)
    seen = []

    def policy(obs):
        seen.append(np.all(np.isfinite(obs)))
        return exported(obs)

    with Go2(Go2Config(domain_id=go2_peer.domain_id)) as robot:
        config = LoopConfig(rate_hz=500, policy_rate_hz=50, seconds=2.0, prepare_seconds=1.0)
        report = ControlLoop(robot, SafetyFilter(robot.spec), policy, InfAfter(after=20), config).run()
        facts = go2_peer.wait_for(lambda f: f["base_height"] < 0.2, timeout=5.0)  # damped: it sinks
    assert all(seen) and 0 < len(seen) <= 20  # the policy ran on the finite ones only
    # 1.6 s of +inf at 50 Hz is 80 refused policy steps (fewer on a loaded machine that skips ticks)
    assert report.interventions["non_finite_observation"] >= 20
    assert report.causes["non_finite_observation"] == "observation entries [0] are [inf]"
    assert report.final_mode == "estop"  # no command for estop_after (0.5 s): as for a stalled policy
    assert report.estop_cause.startswith("stale_command after ")
    assert "non_finite_observation: observation entries [0] are [inf]" in report.estop_cause
    assert sum(facts["unsafe"].values()) == 0, facts["first_unsafe"]


def test_an_exported_policy_refuses_a_non_finite_observation():
    policy = ExportedPolicy(GO2_POLICY)
    obs = np.zeros(45, np.float32)
    obs[3] = np.inf
    assert np.all(np.isfinite(policy.run(obs[None])))  # the graph's normaliser clamps it: a plausible action
    with pytest.raises(NonFiniteObservation, match=r"entries \[3\] are not finite"):
        policy(obs)


def test_a_policy_that_raises_is_logged_and_named_as_the_cause(go2_peer, tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="policyforge.loop")
    # a library user skipping deploy's size check: the graph takes 28 numbers, the Go2 adapter builds 45
    policy = ExportedPolicy(constant_export(tmp_path / "wrong.onnx", 0.0, obs_dim=28, described_obs_dim=28))
    with Go2(Go2Config(domain_id=go2_peer.domain_id)) as robot:
        config = LoopConfig(rate_hz=500, policy_rate_hz=50, seconds=1.5, prepare_seconds=0.5)
        adapter = QuadrupedAdapter(QuadrupedConfig())
        report = ControlLoop(robot, SafetyFilter(robot.spec), policy, adapter, config).run()
    # every policy step until the e-stop fails: ~30 at 50 Hz on an idle machine, 15 seen under load (2026-12-05)
    assert report.final_mode == "estop" and report.interventions["policy_error"] >= 5
    assert report.estop_cause.startswith("stale_command after ")
    expected = "wrong.onnx: input 'obs' must be [B, 28] float32 (B ≥ 1), got [1, 45] float32"
    assert f"policy_error: ValueError: {expected}" in report.estop_cause and expected in report.causes["policy_error"]
    logged = [r for r in caplog.records if r.name == "policyforge.loop" and "policy_error" in r.getMessage()]
    assert logged and expected in logged[0].getMessage()
    assert logged[0].exc_info is not None  # the first one with its traceback


@pytest.fixture(scope="module")
def trained_reach_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    tiny = ["sim.num_envs=8", "algo.rollout_steps=16", "runner.total_env_steps=256", "runner.eval_envs=2"]
    assert main(["train", "configs/arm-reach-ppo.yaml", f"out_dir={out}", "name=reach", *tiny]) == 0
    return out / "reach"


@pytest.fixture
def reach_run(trained_reach_run, tmp_path) -> Path:
    """A copy of a tiny arm-reach PPO run (the policy the Franka deploys), for this test to change."""
    return Path(shutil.copytree(trained_reach_run, tmp_path / "reach"))


def save_new_checkpoint(run: Path, change) -> Path:
    """Write the run's next checkpoint (as training would), its policy weights changed by `change(tensor)`."""
    from policyforge.algos import checkpoint

    state = checkpoint.load(run)
    for name, value in state["algo"]["policy"].items():
        if value.is_floating_point() and name.startswith("net."):
            change(value)
    checkpoint.save(run / "checkpoints", state, state["env_steps"] + 1, keep=5)
    return run / "checkpoints" / "latest.pt"


def test_deploy_exports_a_run_again_when_its_checkpoint_changed(reach_run, monkeypatch):
    def no_subprocess(*args, **kwargs):
        raise AssertionError(f"deploy started a process to export: {args}")

    monkeypatch.setattr(subprocess, "run", no_subprocess)  # the export runs in this process
    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    said = []
    exported = resolve_policy(reach_run, said.append)
    assert exported == reach_run / "export" / "policy.onnx" and said[0].startswith("exporting")
    first = ExportedPolicy(exported)
    obs = np.linspace(-1, 1, first.obs_dim, dtype=np.float32)
    before = first(obs)
    said.clear()
    assert resolve_policy(reach_run, said.append) == exported and len(said) == 1  # current: runs as it is
    assert said[0].startswith(f"policy: {exported} (exported from checkpoints/latest.pt, sha256 ")
    latest = save_new_checkpoint(reach_run, lambda weights: weights.mul_(1.5))
    said.clear()
    resolve_policy(reach_run, said.append)
    assert said[0].startswith(f"exporting {reach_run} to {exported} (it was exported from checkpoints/latest.pt")
    assert f"the run's checkpoint is now checkpoints/latest.pt (sha256 {file_sha256(latest)[:12]}…)" in said[0]
    spec = json.loads(description_path(exported).read_text())
    assert spec["source"]["sha256"] == file_sha256(latest)
    assert not np.allclose(ExportedPolicy(exported)(obs), before)  # the new weights run


def test_a_stale_export_deployed_by_its_file_is_named_as_stale(reach_run):
    exported = resolve_policy(reach_run, lambda _: None)
    save_new_checkpoint(reach_run, lambda weights: weights.mul_(0.9))
    said = []
    assert resolve_policy(exported, said.append) == exported  # the user's choice: run, but not silently
    assert said[1].startswith(f"warning: {exported} is not the export of {exported.parents[1]}'s current checkpoint")


def test_a_nan_checkpoint_is_not_exported_and_its_stale_export_never_runs(reach_run, capsys):
    exported = resolve_policy(reach_run, lambda _: None)
    old = exported.read_bytes()
    save_new_checkpoint(reach_run, lambda weights: weights.fill_(float("nan")))
    assert main(["export", str(reach_run), "--format", "onnx"]) == 2
    printed = " ".join(capsys.readouterr().out.split())
    assert f"error {reach_run} (checkpoints/latest.pt): the policy's actions are not finite" in printed
    assert "weights are NaN/inf" in printed and "nothing was exported" in printed
    assert exported.read_bytes() == old and not list(exported.parent.glob(".*"))  # nothing new, no debris
    code = main(["deploy", str(reach_run), "--robot", "franka", "--peer", "sim"])
    printed = " ".join(capsys.readouterr().out.split())
    assert code == 2 and f"exporting {reach_run} failed, nothing was deployed" in printed
    assert "the policy's actions are not finite" in printed


def test_a_policy_with_scaled_weights_is_exported_and_deployed_with_a_saturation_warning(reach_run, capsys, caplog):
    """×1e6 weights: finite, in-range, bang-bang actions. The export is faithful and warns; on the robot the
    safety filter clamps its steps (tests/real_robot/test_faults.py: nothing unsafe reaches the peer) and the
    deploy says how saturated the policy was."""
    save_new_checkpoint(reach_run, lambda weights: weights.mul_(1e6))
    assert main(["export", str(reach_run), "--format", "onnx"]) == 0
    assert "% of the policy's actions are at the ±1 limits (bang-bang)" in caplog.text
    assert main(["deploy", str(reach_run), "--robot", "franka", "--peer", "sim", "--seconds", "1"]) in (0, 3)
    printed = " ".join(capsys.readouterr().out.split())
    assert "warning: " in printed and "% of the policy's actions are at the ±1 limits" in printed, printed


def test_a_trained_policy_is_not_called_saturated(capsys):
    assert main(["deploy", str(GO2_POLICY), "--robot", "go2", "--peer", "sim", "--seconds", "1"]) == 0
    assert "±1 limits" not in capsys.readouterr().out


@pytest.mark.parametrize("described", ["shipped", "no-sha256", "torn"])
def test_an_export_that_is_not_a_graph_is_refused_naming_the_file(tmp_path, capsys, described):
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(np.random.default_rng(18).bytes(4096))
    spec = json.loads(GO2_POLICY.with_suffix(".json").read_text())
    if described == "shipped":
        spec["graph_sha256"] = file_sha256(GO2_POLICY)  # as every export since policyforge-checkpoint/2 records
    text = json.dumps(spec)
    garbage.with_suffix(".json").write_text(text[: len(text) // 2] if described == "torn" else text)
    assert main(["deploy", str(garbage), "--robot", "go2", "--peer", "sim"]) == 2
    printed = " ".join(capsys.readouterr().out.split())
    expected = {
        "shipped": "is not the graph garbage.json was written for (sha256 differs)",
        "no-sha256": "cannot be loaded as an exported policy: InvalidProtobuf",
        "torn": "garbage.json is not a readable export description",
    }[described]
    assert expected in printed and "Traceback" not in printed, printed


def test_an_older_shared_description_of_the_other_format_is_refused(tmp_path, capsys):
    """Before one description per file, policy.onnx and policy.pt shared policy.json: the last export's."""
    from policyforge.policies.gaussian import GaussianConfig, GaussianPolicy

    policy = GaussianPolicy(45, 12, GaussianConfig(hidden=[16])).eval()
    metadata = {"task": "quadruped-walk", "control_dt": 0.02, "task_options": {}}
    onnx_path = export(policy, tmp_path / "policy.onnx", "onnx", metadata)
    torchscript_path = export(policy, tmp_path / "policy.pt", "torchscript", metadata)
    description_path(torchscript_path).rename(tmp_path / "policy.json")
    description_path(onnx_path).unlink()
    assert ExportedPolicy(torchscript_path).spec["format"] == "torchscript"  # read: it describes this file
    assert main(["deploy", str(onnx_path), "--robot", "go2", "--peer", "sim"]) == 2
    printed = " ".join(capsys.readouterr().out.split())
    assert "policy.json describes a torchscript export, not policy.onnx (onnx)" in printed, printed
    assert "export it again with `policyforge export RUN` (it writes policy.onnx and policy.onnx.json)" in printed


def test_the_shipped_exports_of_an_older_policyforge_still_deploy():
    """tests/real_robot/assets hold exports with the older `<stem>.json` descriptions (format onnx)."""
    for path in (GO2_POLICY, ASSETS / "arm-reach-policy.onnx"):
        assert not description_path(path).exists() and path.with_suffix(".json").exists()
        policy = ExportedPolicy(path)
        assert policy.spec["format"] == "onnx" and policy(np.zeros(policy.obs_dim, np.float32)).shape == (
            policy.action_dim,
        )


def test_a_peer_port_held_by_another_process_is_refused_before_anything_starts(tmp_path):
    """A simulated peer orphaned by a killed run still listening: the new peer could not bind, and the driver would
    silently drive the old one."""
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", 29999))  # the UR dashboard server's port
        squatter.listen()
        refused = pytest.raises(DeployError, match=r"port 29999 on 127\.0\.0\.1 is in use.*ss -ltnp")
        with refused, simulated_peer("ur", 0, tmp_path / "facts.json"):
            pass
    assert not (tmp_path / "facts.json").exists()  # no peer ran


def test_no_robot_on_the_link_is_an_error_message_with_its_own_exit_status(capsys):
    from policyforge.real_robot.deploy_cli import NO_CONNECTION_EXIT

    domain = str(free_domain_id())
    assert main(["deploy", str(GO2_POLICY), "--interface", "lo", "--domain-id", domain]) == NO_CONNECTION_EXIT
    printed = " ".join(capsys.readouterr().out.split())
    assert f"error: Go2: no rt/lowstate within 5.0 s on interface 'lo', DDS domain {domain}" in printed
