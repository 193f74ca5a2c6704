"""The fixed-rate control loop: observe → (policy, at its own rate) → safety filter → send, on a monotonic clock.

Deadlines are `start + k · period` (no drift); a tick that wakes more than a period late counts as an overrun
and the loop skips to the next deadline on the grid. The policy runs in a worker thread: the loop waits for
its action at most `policy_budget` of a policy period, so a stalled policy never stalls the commands — the
safety filter sees no fresh command and falls back to the safe mode. A non-finite observation is refused before
the policy sees it (a normaliser would clamp it into a finite, plausible action), and a policy that raises is
a policy that gave no action: either way the filter sees no fresh command, and the cause is counted, logged and
named in the report (`LoopReport.estop_cause`, `causes`). SIGINT/SIGTERM stop the loop between ticks; an
exception latches the e-stop and sends the safe command before it propagates.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from policyforge.config import check
from policyforge.real_robot.realtime import realtime
from policyforge.real_robot.robot import Command, Robot, RobotState
from policyforge.real_robot.safety import Filtered, SafetyFilter

log = logging.getLogger("policyforge.loop")


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
    cpu_affinity: tuple[int, ...] | None = None
    """CPUs the loop thread and its policy thread are kept on, e.g. (1,) (None: wherever the kernel puts them)."""
    realtime_priority: int | None = None
    """SCHED_FIFO priority (1-99) of the loop thread, its policy thread one lower: they run before every
    ordinary task the moment they wake, so a busy machine does not delay ticks. Needs root or CAP_SYS_NICE;
    where not permitted the loop runs with normal scheduling after one warning. None: normal scheduling."""
    lock_memory: bool = False
    """mlockall(MCL_CURRENT | MCL_FUTURE) while the loop runs: no page of the process is swapped out or read
    back from disk mid-tick (the whole process stays resident). Not permitted: one warning, unlocked."""
    freeze_gc: bool = False
    """Freeze and disable Python's garbage collector while the loop runs, so that no collection pauses a tick;
    reference counting still frees the loop's garbage at once, reference cycles wait for the loop's end."""

    def __post_init__(self) -> None:
        check(self.rate_hz > 0, "rate_hz", f"must be > 0, got {self.rate_hz}")
        ratio = self.rate_hz / self.policy_rate_hz if self.policy_rate_hz > 0 else 0.5
        check(
            abs(ratio - round(ratio)) < 1e-9 and ratio >= 1,
            "policy_rate_hz",
            f"must divide rate_hz={self.rate_hz} (a whole number of ticks per action), got {self.policy_rate_hz}",
        )
        check(0 < self.policy_budget <= 1, "policy_budget", f"must be in (0, 1], got {self.policy_budget}")
        priority = self.realtime_priority
        check(priority is None or 1 <= priority <= 99, "realtime_priority", f"must be in [1, 99], got {priority}")
        cpus, count = self.cpu_affinity, os.cpu_count() or 1
        check(
            cpus is None or (len(cpus) > 0 and all(0 <= cpu < count for cpu in cpus)),
            "cpu_affinity",
            f"must name CPUs among 0..{count - 1} of this computer, got {cpus}",
        )


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
    """Safety-filter interventions by reason, and the policy steps the loop itself gave no action for:
    non_finite_observation (refused before the policy ran), policy_error (it raised), policy_late (no answer
    within its budget)."""
    final_mode: str
    observations: np.ndarray
    """What the policy saw, [T, D]."""
    actions: np.ndarray
    """What it answered, [T, A] (before the safety filter)."""
    estop_cause: str | None = None
    """Why the e-stop latched: the filter's faults at that tick and the cause behind them, e.g. "stale_command
    after policy_error: RuntimeError: …"; None when it did not latch."""
    causes: dict[str, str] = dataclasses.field(default_factory=dict)
    """The first message of each reason the loop gave no action for (see `interventions`)."""
    realtime: tuple[str, ...] = ()
    """The real-time options in force during the loop (see `LoopConfig`; any refused are logged)."""
    commands_sent: int = 0
    """Commands sent to the robot, one per tick that ran (`ticks` counts the skipped deadlines too)."""
    wall_s: float = 0.0
    """How long the loop ran (preparation included), s."""
    longest_gap_ms: float = 0.0
    """The longest time between two commands sent (ms): what a robot's command watchdog sees of overruns."""
    latency_ms: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    """[T] for each policy action: from when the robot measured the state it answers to when its first command
    was sent (the state's age, the policy, the filter and the send), ms — the action latency a simulation should
    train with (`sim.corruption.action_latency_steps`)."""


class PolicyError(RuntimeError):
    """The policy raised; the message is its exception's (chained as the cause)."""


class PolicyWorker:
    """Runs `policy(obs) -> action` in a background thread, one request at a time."""

    def __init__(self, policy: Callable[[np.ndarray], np.ndarray]):
        self.policy = policy
        self._request: np.ndarray | None = None
        self._result: np.ndarray | None = None
        self._error: Exception | None = None
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
            self._request, self._result, self._error, self._busy = obs, None, None, True
            self._cv.notify_all()
            return True

    def result(self, timeout: float) -> np.ndarray | None:
        """The answer to the last request, waiting at most `timeout` s; None if not ready. PolicyError if the
        policy raised on it (once)."""
        with self._cv:
            self._cv.wait_for(lambda: not self._busy, timeout=timeout)
            result, error, self._result, self._error = self._result, self._error, None, None
        if error is not None:  # one line: onnxruntime's messages span several
            raise PolicyError(f"{type(error).__name__}: {' '.join(str(error).split())[:500]}") from error
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
            action = error = None
            try:
                action = np.asarray(self.policy(obs), dtype=np.float64)
            except Exception as err:  # handed to the loop (`result`), which names it as the cause
                error = err
            with self._cv:
                self._result, self._error, self._busy = action, error, False
                self._cv.notify_all()


class PolicySteps:
    """The loop's observation → policy → action step: refuses non-finite observations before the policy runs,
    runs the policy in a `PolicyWorker` within `budget` s, and passes its action through the safety filter's
    action check. When no action comes, the reason is counted (`counts`; the loop's report and deploy's heartbeat
    show them), logged the first time (with the policy's traceback) and kept as the current cause, which names the
    e-stop if one latches (`note`)."""

    def __init__(self, policy: Callable[[np.ndarray], np.ndarray], safety: SafetyFilter, budget: float):
        self.worker, self.safety, self.budget = PolicyWorker(policy), safety, budget
        self.counts: collections.Counter[str] = collections.Counter()
        self.causes: dict[str, str] = {}
        """The first message of each reason."""
        self.estop_cause: str | None = None
        self._since_accepted: dict[str, str] = {}
        """Why no action came since the last accepted one: the first message of each reason, in order."""

    def __call__(self, obs: np.ndarray) -> np.ndarray | None:
        """The policy's action [A] for observation [D], or None (counted and named) when there is none."""
        if not np.all(np.isfinite(obs)):
            bad = np.flatnonzero(~np.isfinite(obs))
            return self._refuse(
                "non_finite_observation", f"observation entries {bad[:8].tolist()} are {obs[bad[:8]].tolist()}"
            )
        try:
            ready = self.worker.submit(obs)  # False: still busy with an older request; take its answer if ready
            action = self.worker.result(timeout=self.budget if ready else 0.0)
        except PolicyError as err:
            return self._refuse("policy_error", str(err), err)
        if action is None:
            return self._refuse("policy_late", f"no action within {self.budget * 1e3:.1f} ms")
        before = self.safety.counts.copy()
        if not self.safety.check_action(action, time.monotonic()):  # counted by the filter under its own reasons
            refused = " and ".join(sorted(self.safety.counts - before)) or "refused"
            self._since_accepted.setdefault(refused, "the safety filter refused the policy's action")
            return None
        self._since_accepted.clear()
        return action

    def note(self, filtered: Filtered) -> None:
        """Name the cause of the e-stop when it latches (the filter's faults at that tick, and the cause behind)."""
        if filtered.mode == "estop" and self.estop_cause is None:
            self.estop_cause = self.describe([r for r in filtered.reasons if r != "estop"])

    def describe(self, faults: list[str] | None = None) -> str:
        """`faults` (the filter's reasons) and what kept the policy's actions away since the last accepted one,
        e.g. "stale_command after policy_error: RuntimeError: …"."""
        cause = "; ".join(f"{reason}: {message}" for reason, message in self._since_accepted.items())
        return " after ".join(t for t in (" and ".join(faults or []), cause) if t) or "the safety filter latched it"

    def close(self) -> None:
        self.worker.close()

    def _refuse(self, reason: str, message: str, error: BaseException | None = None) -> None:
        self.counts[reason] += 1
        self.causes.setdefault(reason, message)
        self._since_accepted.setdefault(reason, message)
        if self.counts[reason] == 1:
            cause = error.__cause__ if error is not None else None
            log.error(
                "no policy action (%s; further ones are counted, not logged): %s", reason, message, exc_info=cause
            )


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
        self._steps: PolicySteps | None = None
        self._realtime_applied: list[str] = []
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
        self._steps = steps = PolicySteps(self.policy, self.safety, config.policy_budget * period * decimation)
        lateness, observations, actions, sent_at, latency = [], [], [], [], []
        last_action = np.zeros(self.adapter.action_dim)
        ramp_from = self.robot.observe().joint_pos.copy()
        tick = overruns = 0
        next_policy_tick = prepare_ticks  # the policy acts at the first tick at or after each of its deadlines
        with _stop_on_signals(self.stop), self._realtime(steps.worker) as self._realtime_applied:
            start = time.monotonic()
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
                        action = steps(obs)
                        if action is not None:
                            observations.append(obs)
                            actions.append(action)
                            last_action = np.clip(action, -1.0, 1.0)
                            command = self.adapter.command(action)
                    filtered = self.safety(command, state, time.monotonic())
                    steps.note(filtered)
                    self.safety.sent(self.robot.send(filtered.command))
                    sent_at.append(time.monotonic())
                    if command is not None and tick >= prepare_ticks:  # a new action's first command
                        latency.append(sent_at[-1] - state.stamp)
                    if self.on_tick is not None:
                        self.on_tick(tick, state, filtered)
                    tick += 1
            except BaseException:
                self._send_safe("exception in the control loop")
                raise
            finally:
                steps.close()
                self.report = self._report(tick, lateness, overruns, observations, actions, sent_at, start)
                self.report.latency_ms = np.asarray(latency) * 1e3
        return self.report

    def _realtime(self, worker: PolicyWorker) -> contextlib.AbstractContextManager[list[str]]:
        """The loop's real-time options (`LoopConfig`), on this thread and, one priority lower, on the policy's
        thread (the loop waits for it)."""
        c = self.config
        threads = ((0, 0), (worker._thread.native_id, -1))
        return realtime(c.cpu_affinity, c.realtime_priority, c.lock_memory, c.freeze_gc, threads)

    def _send_safe(self, reason: str) -> None:
        if self._steps.estop_cause is None:
            self._steps.estop_cause = reason
        with contextlib.suppress(Exception):
            now = time.monotonic()
            self.safety.trigger_estop(reason, now)
            self.robot.send(self.safety(None, self.robot.observe(), now).command)

    def interventions(self) -> dict[str, int]:
        """The interventions so far, by reason (`LoopReport.interventions`); may be read from another thread
        (one that adds a reason while this copies the counters makes it try again)."""
        while True:
            with contextlib.suppress(RuntimeError):
                return dict(self.safety.counts + (self._steps.counts if self._steps else collections.Counter()))

    def _report(
        self, ticks: int, lateness: list, overruns: int, observations: list, actions: list, sent_at: list, start: float
    ) -> LoopReport:
        late_ms = np.asarray(lateness) * 1e3 if lateness else np.zeros(1)
        gaps_ms = np.diff(sent_at) * 1e3 if len(sent_at) > 1 else np.zeros(1)
        return LoopReport(
            ticks=ticks,
            policy_steps=len(actions),
            jitter_ms={
                "median": float(np.median(late_ms)),
                "p99": float(np.percentile(late_ms, 99)),
                "max": float(late_ms.max()),
            },
            overruns=overruns,
            commands_sent=len(sent_at),
            wall_s=time.monotonic() - start,
            longest_gap_ms=float(gaps_ms.max()),
            interventions=self.interventions(),
            final_mode="estop" if self.safety.estopped else "normal",
            observations=np.asarray(observations, dtype=np.float32),
            actions=np.asarray(actions, dtype=np.float32),
            estop_cause=(self._steps.estop_cause or self._steps.describe()) if self.safety.estopped else None,
            causes=dict(self._steps.causes),
            realtime=tuple(self._realtime_applied),
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
