"""The control loop's real-time options (LoopConfig): applied to the loop's threads while it runs, undone after,
and skipped with one warning where the system does not permit them."""

from __future__ import annotations

import ctypes
import gc
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from policyforge.config import ConfigError
from policyforge.real_robot.loop import ControlLoop, LoopConfig
from policyforge.real_robot.robot import Command, Robot, RobotSpec, RobotState
from policyforge.real_robot.safety import SafetyFilter

J = 2
CAP_IPC_LOCK, CAP_SYS_NICE, PR_CAPBSET_DROP = 14, 23, 24


class StillRobot(Robot):
    """A robot that stands still where it is: fresh states, commands recorded (the loop is under test here)."""

    spec = RobotSpec(
        name="still", joint_names=("a", "b"), position_low=np.full(J, -1.0), position_high=np.full(J, 1.0),
        max_velocity=np.ones(J), max_torque=np.ones(J), control_rate_hz=200.0, safe_mode="hold",
    )  # fmt: skip

    def __init__(self):
        self.sent = 0

    def connect(self, timeout: float = 5.0) -> None:
        pass

    def observe(self) -> RobotState:
        return RobotState(stamp=time.monotonic(), joint_pos=np.zeros(J), joint_vel=np.zeros(J))

    def send(self, command: Command) -> Command:
        self.sent += 1
        return command

    def disconnect(self) -> None:
        pass


class HoldAdapter:
    action_dim = J
    default_pose = np.zeros(J)

    def observation(self, state: RobotState, last_action: np.ndarray) -> np.ndarray:
        return state.joint_pos

    def command(self, action: np.ndarray) -> Command:
        return Command(position=np.zeros(J))

    def pose_command(self, position: np.ndarray) -> Command:
        return Command(position=np.asarray(position, dtype=np.float64))


def thread_facts(tid: int = 0) -> dict:
    return {
        "fifo": os.sched_getscheduler(tid) == os.SCHED_FIFO,
        "priority": os.sched_getparam(tid).sched_priority,
        "cpus": sorted(os.sched_getaffinity(tid)),
    }


def locked_kib() -> int:
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmLck:")[1].split()[0])


def run_loop(**options) -> tuple[dict, dict, object]:
    """Run a 0.3 s loop with `options`; the facts seen in the middle of it (loop and policy threads, GC, locked
    memory) and the report."""
    seen = {}

    def on_tick(tick, state, filtered):
        if tick >= 40 and not seen:  # (a loaded machine may skip a tick)
            policy_thread = next(t for t in threading.enumerate() if t.name == "policy")
            seen.update(loop=thread_facts(), policy=thread_facts(policy_thread.native_id))
            seen.update(gc_enabled=gc.isenabled(), gc_frozen=gc.get_freeze_count() > 0, locked_kib=locked_kib())

    config = LoopConfig(rate_hz=200.0, policy_rate_hz=50.0, seconds=0.2, prepare_seconds=0.1, **options)
    loop = ControlLoop(
        StillRobot(), SafetyFilter(StillRobot.spec), lambda obs: np.zeros(J), HoldAdapter(), config, on_tick
    )
    report = loop.run()
    return seen, {"loop": thread_facts(), "gc_enabled": gc.isenabled(), "locked_kib": locked_kib()}, report


ALL = {"cpu_affinity": (0,), "realtime_priority": 50, "lock_memory": True, "freeze_gc": True}


def fifo_permitted() -> bool:
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except PermissionError:
        return False
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    return True


@pytest.mark.skipif(not fifo_permitted(), reason="SCHED_FIFO is not permitted here (the fallback test covers it)")
def test_realtime_options_hold_during_the_loop_and_are_undone_after():
    before = {"loop": thread_facts(), "gc_enabled": gc.isenabled(), "locked_kib": locked_kib()}
    during, after, report = run_loop(**ALL)
    assert report.realtime == ("affinity", "sched_fifo", "mlockall", "gc_frozen")
    assert during["loop"] == {"fifo": True, "priority": 50, "cpus": [0]}
    assert during["policy"] == {"fifo": True, "priority": 49, "cpus": [0]}  # the loop waits on it: one below
    assert not during["gc_enabled"] and during["gc_frozen"] and during["locked_kib"] > 10_000
    assert after == before and gc.get_freeze_count() == 0
    assert report.ticks >= 60 and report.final_mode == "normal"


def test_without_options_the_loop_changes_nothing():
    during, after, report = run_loop()
    assert report.realtime == ()
    assert during["loop"] == after["loop"] and not during["loop"]["fifo"] and during["gc_enabled"]


def drop_realtime_privileges() -> None:
    """In the child before exec: no CAP_SYS_NICE / CAP_IPC_LOCK (as for a user without them), no rtprio, little
    lockable memory."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (CAP_SYS_NICE, CAP_IPC_LOCK):
        libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0)  # fails harmlessly where we never had them
    resource.setrlimit(resource.RLIMIT_RTPRIO, (0, 0))
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (64 * 1024, 64 * 1024))


def test_options_not_permitted_fall_back_with_one_warning():
    script = (
        "import json, logging, runpy, sys\n"
        "records = []\n"
        "handler = logging.Handler(); handler.emit = records.append\n"
        "logging.getLogger('policyforge').addHandler(handler)\n"
        f"ns = runpy.run_path({__file__!r})\n"
        "during, after, report = ns['run_loop'](**ns['ALL'])\n"
        "warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]\n"
        "print(json.dumps({'during': during, 'realtime': report.realtime, 'ticks': report.ticks, "
        "'warnings': warnings}))\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, preexec_fn=drop_realtime_privileges
    )
    assert child.returncode == 0, child.stderr[-3000:]
    facts = json.loads(child.stdout.strip().splitlines()[-1])
    assert facts["realtime"] == ["affinity", "gc_frozen"] and facts["ticks"] >= 60  # the loop ran all the same
    assert not facts["during"]["loop"]["fifo"] and facts["during"]["loop"]["cpus"] == [0]
    assert len(facts["warnings"]) == 1, facts["warnings"]
    assert "sched_fifo (Operation not permitted)" in facts["warnings"][0] and "mlockall" in facts["warnings"][0]
    assert "CAP_SYS_NICE" in facts["warnings"][0]


@pytest.mark.parametrize(
    "options, field",
    [
        ({"realtime_priority": 0}, "realtime_priority"),
        ({"realtime_priority": 100}, "realtime_priority"),
        ({"cpu_affinity": ()}, "cpu_affinity"),
        ({"cpu_affinity": (os.cpu_count(),)}, "cpu_affinity"),
    ],
)
def test_bad_realtime_options_are_refused_naming_the_field(options, field):
    with pytest.raises(ConfigError, match=field):
        LoopConfig(**options)
