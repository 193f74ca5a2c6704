"""The fixed-rate control loop: observe → (policy, at its own rate) → safety filter → send, on a monotonic clock.

Deadlines are `start + k · period` (no drift); a tick that wakes more than a period late counts as an overrun
and the loop skips to the next deadline on the grid. The policy runs in a worker thread: the loop waits for
its action at most `policy_budget` of a policy period, so a stalled policy never stalls the commands — the
safety filter sees no fresh command and falls back to the safe mode. SIGINT/SIGTERM stop the loop between
ticks; an exception latches the e-stop and sends the safe command before it propagates.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from policyforge.config import check
from policyforge.real_robot.robot import Command, Robot, RobotState
from policyforge.real_robot.safety import Filtered, SafetyFilter


class TaskAdapter(Protocol):
    """How a task's policy meets a robot: the simulator's observation and action code, applied to robot data."""

    action_dim: int
    """Size A of the policy's actions."""
    default_pose: np.ndarray
    """Joint pose [J] the robot is brought to before the policy starts, rad."""

    def observation(self, state: RobotState, last_action: np.ndarray) -> np.ndarray:
        """The policy's observation [D] (as the simulator builds it) from a robot state."""

    def command(self, action: np.ndarray) -> Command:
        """The command of a policy action [A] in [-1, 1] (as the simulator applies it)."""

    def pose_command(self, position: np.ndarray) -> Command:
        """A command that moves the joints to `position` [J] (the stand-up / homing phase)."""


@dataclasses.dataclass
class LoopConfig:
    """Rates and phases of a control loop."""

    rate_hz: float = 50.0
    """Ticks per second: commands sent to the robot."""
    policy_rate_hz: float = 50.0
    """Policy actions per second; must divide rate_hz (e.g. 50 Hz policy in a 500 Hz loop)."""
    seconds: float | None = 10.0
    """Length of the policy phase, s (None: until stopped)."""
    prepare_seconds: float = 2.0
    """The robot is moved to the adapter's default pose over this long before the policy starts, s."""
    policy_budget: float = 0.5
    """Wait at most this fraction of a policy period for the policy's action."""

    def __post_init__(self) -> None:
        check(self.rate_hz > 0, "rate_hz", f"must be > 0, got {self.rate_hz}")
        ratio = self.rate_hz / self.policy_rate_hz if self.policy_rate_hz > 0 else 0.5
        check(
            abs(ratio - round(ratio)) < 1e-9 and ratio >= 1,
            "policy_rate_hz",
            f"must divide rate_hz={self.rate_hz} (a whole number of ticks per action), got {self.policy_rate_hz}",
        )
        check(0 < self.policy_budget <= 1, "policy_budget", f"must be in (0, 1], got {self.policy_budget}")


@dataclasses.dataclass
class LoopReport:
    """What a run of the loop did."""

    ticks: int
    policy_steps: int
    jitter_ms: dict[str, float]
    """Lateness of each tick's wake-up behind its deadline: median, p99, max (ms)."""
    overruns: int
    """Ticks that woke more than a period late (skipped deadlines)."""
    interventions: dict[str, int]
    """Safety-filter interventions by reason."""
    final_mode: str
    observations: np.ndarray
    """What the policy saw, [T, D]."""
    actions: np.ndarray
    """What it answered, [T, A] (before the safety filter)."""


class PolicyWorker:
    """Runs `policy(obs) -> action` in a background thread, one request at a time."""

    def __init__(self, policy: Callable[[np.ndarray], np.ndarray]):
        self.policy = policy
        self._request: np.ndarray | None = None
        self._result: np.ndarray | None = None
        self._busy = False
        self._cv = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="policy", daemon=True)
        self._thread.start()

    def submit(self, obs: np.ndarray) -> bool:
        """Ask for an action; False (and dropped) while the previous request is still being computed."""
        with self._cv:
            if self._busy:
                return False
            self._request, self._result, self._busy = obs, None, True
            self._cv.notify_all()
            return True

    def result(self, timeout: float) -> np.ndarray | None:
        """The answer to the last request, waiting at most `timeout` s; None if not ready (or the policy
        raised: a crashing policy is a stalled policy, the safety filter handles it)."""
        with self._cv:
            self._cv.wait_for(lambda: not self._busy, timeout=timeout)
            result, self._result = self._result, None
            return result

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def _serve(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._request is not None or self._closed)
                if self._closed:
                    return
                obs, self._request = self._request, None
            try:
                action = np.asarray(self.policy(obs), dtype=np.float64)
            except Exception:
                action = None
            with self._cv:
                self._result, self._busy = action, False
                self._cv.notify_all()


class ControlLoop:
    """Runs a policy on a connected robot through a safety filter (module docstring)."""

    def __init__(
        self,
        robot: Robot,
        safety: SafetyFilter,
        policy: Callable[[np.ndarray], np.ndarray],
        adapter: TaskAdapter,
        config: LoopConfig | None = None,
        on_tick: Callable[[int, RobotState, Filtered], None] | None = None,
    ):
        self.robot, self.safety, self.adapter = robot, safety, adapter
        self.config = config or LoopConfig()
        self.policy = policy
        self.on_tick = on_tick
        self.report: LoopReport | None = None
        """The last run's report, also when it ended with an exception (up to that tick)."""
        self._stop = threading.Event()

    def stop(self) -> None:
        """Ask the loop to end after the current tick (thread- and signal-safe)."""
        self._stop.set()

    def run(self) -> LoopReport:
        """Prepare (move to the default pose), then run the policy for `config.seconds`."""
        config = self.config
        period = 1.0 / config.rate_hz
        decimation = round(config.rate_hz / config.policy_rate_hz)
        prepare_ticks = round(config.prepare_seconds * config.rate_hz)
        total = None if config.seconds is None else prepare_ticks + round(config.seconds * config.rate_hz)
        worker = PolicyWorker(self.policy)
        lateness, observations, actions = [], [], []
        last_action = np.zeros(self.adapter.action_dim)
        ramp_from = self.robot.observe().joint_pos.copy()
        tick = overruns = 0
        next_policy_tick = prepare_ticks  # the policy acts at the first tick at or after each of its deadlines
        start = time.monotonic()
        with _stop_on_signals(self.stop):
            try:
                while not self._stop.is_set() and (total is None or tick < total):
                    deadline = start + tick * period
                    now = _sleep_until(deadline)
                    if now - deadline > period:  # woke a whole period late: skip to the grid
                        overruns += 1
                        tick = int((now - start) / period) + 1
                        continue
                    lateness.append(now - deadline)
                    state = self.robot.observe()
                    command = None
                    if tick < prepare_ticks:
                        blend = min(1.0, (tick + 1) / max(prepare_ticks, 1))
                        command = self.adapter.pose_command((1 - blend) * ramp_from + blend * self.adapter.default_pose)
                    elif tick >= next_policy_tick:
                        next_policy_tick = prepare_ticks + ((tick - prepare_ticks) // decimation + 1) * decimation
                        obs = self.adapter.observation(state, last_action)
                        if worker.submit(obs):
                            action = worker.result(timeout=config.policy_budget * period * decimation)
                        else:  # still busy with an older request: take its answer if it is ready now
                            action = worker.result(timeout=0.0)
                        if action is not None and self.safety.check_action(action, time.monotonic()):
                            observations.append(obs)
                            actions.append(action)
                            last_action = np.clip(action, -1.0, 1.0)
                            command = self.adapter.command(action)
                    filtered = self.safety(command, state, time.monotonic())
                    self.robot.send(filtered.command)
                    if self.on_tick is not None:
                        self.on_tick(tick, state, filtered)
                    tick += 1
            except BaseException:
                self._send_safe("exception in the control loop")
                raise
            finally:
                worker.close()
                self.report = self._report(tick, lateness, overruns, observations, actions)
        return self.report

    def _send_safe(self, reason: str) -> None:
        with contextlib.suppress(Exception):
            now = time.monotonic()
            self.safety.trigger_estop(reason, now)
            self.robot.send(self.safety(None, self.robot.observe(), now).command)

    def _report(
        self, ticks: int, lateness: list[float], overruns: int, observations: list, actions: list
    ) -> LoopReport:
        late_ms = np.asarray(lateness) * 1e3 if lateness else np.zeros(1)
        return LoopReport(
            ticks=ticks,
            policy_steps=len(actions),
            jitter_ms={
                "median": float(np.median(late_ms)),
                "p99": float(np.percentile(late_ms, 99)),
                "max": float(late_ms.max()),
            },
            overruns=overruns,
            interventions=dict(self.safety.counts),
            final_mode="estop" if self.safety.estopped else "normal",
            observations=np.asarray(observations, dtype=np.float32),
            actions=np.asarray(actions, dtype=np.float32),
        )


def _sleep_until(deadline: float) -> float:
    """Sleep until `deadline` (monotonic s): coarse sleep, then a short spin for the last 0.3 ms."""
    while True:
        now = time.monotonic()
        remaining = deadline - now
        if remaining <= 0:
            return now
        time.sleep(remaining - 3e-4 if remaining > 6e-4 else 0)


@contextlib.contextmanager
def _stop_on_signals(stop: Callable[[], None]):
    """SIGINT/SIGTERM call `stop` while inside (main thread only; elsewhere the caller must stop the loop)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, lambda *_: stop()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
