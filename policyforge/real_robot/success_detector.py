"""A reward model watching a deployment (`policyforge deploy --reward-model RUN`): the task's progress and a success
probability, scored every `period_s` on a thread of its own, so the control loop never waits for it.

What it looks at: the protocol peers (franky-sim, the Go2 peer) render nothing, so the frames are the arm's MuJoCo
twin (`arm_adapter`: the scene the deployment announced) posed at the joints the robot reports, drawn as the
simulator draws image observations. On a real arm the same model would read its cameras instead; this is how far
the twin can stand in for them: it shows where the arm is, not what the cubes really did.

    detector = SuccessDetector(model, adapter, period_s=0.2)
    loop = ControlLoop(..., on_tick=detector.on_tick)        # cheap: keeps the latest joints
    with detector.watching(): loop.run()
    detector.summary()   # {"scored", "progress_first", "progress_last", "progress_max", "success_last", ...}
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import torch

from policyforge.config import check
from policyforge.real_robot.robot import RobotState
from policyforge.real_robot.safety import Filtered
from policyforge.rewards.base import RewardModel

if TYPE_CHECKING:
    from policyforge.real_robot.arm_adapter import ArmAdapter
    from policyforge.real_robot.launch import DeployConfig


class SuccessDetector:
    """Scores the twin at the latest measured joints every `period_s` (module docstring)."""

    def __init__(self, model: RewardModel, adapter, period_s: float, success_threshold: float = 0.5):
        self.model, self.adapter, self.period_s, self.threshold = model, adapter, period_s, success_threshold
        self.instruction = adapter.task.instructions(adapter.vars)[0]
        self._latest: np.ndarray | None = None
        self._lock = threading.Lock()
        self.scores: list[tuple[float, float, float]] = []
        """(seconds since the first tick, progress, success probability) of every scoring."""
        self._started: float | None = None

    def on_tick(self, tick: int, state: RobotState, filtered: Filtered) -> None:
        with self._lock:
            self._latest = np.array(state.joint_pos, dtype=np.float64)
            if self._started is None:
                self._started = time.monotonic()

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Score on a thread while the block runs (the loop), and once more on the final joints after it."""
        done = threading.Event()
        errors: list[BaseException] = []
        thread = threading.Thread(target=self._run, args=(done, errors), name="success-detector", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()
        if errors:
            raise errors[0]

    def _run(self, done: threading.Event, errors: list[BaseException]) -> None:
        from policyforge.sims.render import TiledRenderer

        try:
            inputs = self.model.inputs
            renderer = TiledRenderer(
                self.adapter.task.model, inputs.width, inputs.height
            )  # its GL context: this thread
            data = self.adapter.twin_copy()
            window = None
            try:
                while True:
                    finished = done.wait(self.period_s)
                    with self._lock:
                        joints = None if self._latest is None else self._latest.copy()
                    if joints is not None:
                        self.adapter.pose(data, joints)
                        frame = torch.as_tensor(renderer.render([data], list(inputs.cameras)))  # [1, V, H, W, 3]
                        window = frame.expand(inputs.window, *frame.shape[1:]).clone() if window is None else (
                            torch.cat([window[1:], frame])
                        )  # fmt: skip
                        scores = self.model.score(window[None], [self.instruction])
                        elapsed = time.monotonic() - (self._started or time.monotonic())
                        self.scores.append((elapsed, float(scores.progress[0]), float(scores.success[0])))
                    if finished:
                        return
            finally:
                renderer.close()
        except BaseException as err:  # raised again by `watching`, on the deploying thread
            errors.append(err)

    def summary(self) -> dict[str, float | int | bool | str]:
        """The scoring's figures: first, last and highest progress, last and highest success probability, and
        whether the last scoring calls the task done."""
        if not self.scores:
            return {"scored": 0}
        _, progress, success = np.array(self.scores).T
        return {
            "instruction": self.instruction,
            "scored": len(self.scores),
            "progress_first": float(progress[0]),
            "progress_last": float(progress[-1]),
            "progress_max": float(progress.max()),
            "success_last": float(success[-1]),
            "success_max": float(success.max()),
            "success": bool(success[-1] >= self.threshold),
        }


def success_detector(config: DeployConfig, adapter: ArmAdapter) -> SuccessDetector | None:
    """The reward model watching the deployment (`config.reward_model`), checked before anything connects."""
    if config.reward_model is None:
        return None
    check(
        getattr(adapter, "has_scene", False),
        "reward_model",
        "scores an instructed task from the arm's twin: deploy an arm-instructed policy",
    )
    from policyforge.rewards.learned import load_learned

    return SuccessDetector(load_learned(config.reward_model), adapter, config.reward_every_s)


def detector_line(summary: dict) -> str:
    """What the reward model made of the deployment, in words."""
    if not summary.get("scored"):
        return "reward model: no scoring (the policy never ran)"
    done = "done" if summary["success"] else "not done"
    return (
        f"reward model ({summary['scored']} scorings of the twin's camera at the measured joints): "
        f"progress {summary['progress_first']:.2f} → {summary['progress_last']:.2f} (highest "
        f"{summary['progress_max']:.2f}), success probability {summary['success_last']:.2f}: {done}"
    )
