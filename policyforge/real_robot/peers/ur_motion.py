"""The simulated UR arm's joints under URScript motion commands, and where the client may have measured them
(the reference of a servo session's first target, for the audit)."""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np

Mode = Literal["servo", "move", "speed", "stop", "still"]
MEASUREMENT_LATENCY = 0.05
"""A servo session's first target may lead the joint by its speed times this (the client measured it earlier), s."""


@dataclasses.dataclass
class Trapezoid:
    """movej's profile along the leading axis: accelerate, cruise, decelerate over `distance` (rad)."""

    distance: float
    speed: float
    acceleration: float

    def __post_init__(self) -> None:
        self.ramp = self.speed / self.acceleration
        if self.distance < self.speed * self.ramp:  # too short to reach the speed: a triangle
            self.ramp = np.sqrt(self.distance / self.acceleration)
            self.speed = self.acceleration * self.ramp
        self.cruise = self.distance / self.speed - self.ramp if self.speed > 0 else 0.0
        self.duration = 2 * self.ramp + self.cruise

    def at(self, t: float) -> tuple[float, float]:
        """Distance travelled (rad) and speed (rad/s) at time t (s)."""
        if t <= 0:
            return 0.0, 0.0
        if t < self.ramp:
            return 0.5 * self.acceleration * t**2, self.acceleration * t
        if t < self.ramp + self.cruise:
            return 0.5 * self.speed * self.ramp + self.speed * (t - self.ramp), self.speed
        left = max(self.duration - t, 0.0)
        return self.distance - 0.5 * self.acceleration * left**2, self.acceleration * left


class JointMotion:
    """Joint positions `q` [6] (rad) and velocities `qd` [6] (rad/s) moved by one motion at a time, each
    joint within ±`max_velocity` [6] and its motion's acceleration:

    - servo (servoj): the target is smoothed by a first-order filter with the lookahead time as its time
      constant; each joint is pulled towards the smoothed target at `gain` (1/s), no faster than it can still
      brake at `max_acceleration`. An approximation of UR's servoj, not its interpolator.
    - move (movej): from rest (a moving arm brakes first), a trapezoidal profile of the leading joint at the
      requested speed and acceleration, the others scaled to arrive together; then still.
    - speed (speedj): each joint's velocity ramps to its target at the given acceleration, and stays.
    - stop (stopj, stopl, a program's end): the velocities ramp to zero; then still.
    """

    def __init__(self, q: np.ndarray, qd: np.ndarray, max_velocity: np.ndarray):
        self.q, self.qd = np.array(q, dtype=np.float64), np.array(qd, dtype=np.float64)
        self.max_velocity = max_velocity
        self.mode: Mode = "still"
        self.target = self.q.copy()
        """servo and move: joint targets [6], rad; speed: joint velocities [6], rad/s."""
        self.acceleration = 0.0
        self.smoothed = self.q.copy()
        self.lookahead = self.gain = self.move_speed = 0.0
        self.profile: tuple[np.ndarray, Trapezoid] | None = None
        self.elapsed = 0.0

    def servo(self, target: np.ndarray, lookahead: float, gain: float, max_acceleration: float) -> None:
        if self.mode != "servo":
            self.smoothed = self.q.copy()
        self.mode, self.target, self.acceleration = "servo", target, max_acceleration
        self.lookahead, self.gain = lookahead, gain

    def move(self, target: np.ndarray, speed: float, acceleration: float) -> None:
        self.mode, self.target, self.profile = "move", target, None
        self.move_speed, self.acceleration = min(speed, float(np.min(self.max_velocity))), acceleration

    def speed(self, velocity: np.ndarray, acceleration: float) -> None:
        self.mode, self.target, self.acceleration = "speed", velocity, acceleration

    def stop(self, deceleration: float) -> None:
        self.mode, self.acceleration = "stop", deceleration

    def step(self, dt: float) -> None:
        """Advance dt seconds."""
        if self.mode == "servo":
            self.smoothed += (self.target - self.smoothed) * min(dt / max(self.lookahead, dt), 1.0)
            error = self.smoothed - self.q
            pull = np.abs(error) * (1 - np.exp(-self.gain * dt)) / dt  # exact first-order decay over the tick
            brake = np.sqrt(2 * 0.8 * self.acceleration * np.abs(error))  # 0.8: brake before the last tick
            self._accelerate(np.sign(error) * np.minimum(pull, brake), dt)
        elif self.mode == "speed":
            self._accelerate(self.target, dt)
        elif self.mode == "stop" or (self.mode == "move" and self.profile is None and np.any(self.qd)):
            self._accelerate(np.zeros_like(self.qd), dt)
            if self.mode == "stop" and not np.any(self.qd):
                self.mode = "still"
        elif self.mode == "move":
            self._follow_profile(dt)

    def _accelerate(self, velocity: np.ndarray, dt: float) -> None:
        velocity = np.clip(velocity, -self.max_velocity, self.max_velocity)
        change = self.acceleration * dt
        self.qd = np.clip(velocity, self.qd - change, self.qd + change)
        self.q = self.q + self.qd * dt

    def _follow_profile(self, dt: float) -> None:
        if self.profile is None:
            start = self.q.copy()
            distance = float(np.max(np.abs(self.target - start)))
            self.profile, self.elapsed = (start, Trapezoid(distance, self.move_speed, self.acceleration)), 0.0
        start, trapezoid = self.profile
        self.elapsed += dt
        travelled, speed = trapezoid.at(self.elapsed)
        direction = (self.target - start) / trapezoid.distance if trapezoid.distance > 0 else np.zeros(6)
        self.q, self.qd = start + direction * travelled, direction * speed
        if self.elapsed >= trapezoid.duration:
            self.q, self.qd, self.mode = self.target.copy(), np.zeros(6), "still"


def measured_window(joint_pos: np.ndarray, joint_vel: np.ndarray) -> np.ndarray:
    """The joint positions [2, 6] between which the client may have measured the joints `joint_pos` [6] (rad)
    moving at `joint_vel` [6] (rad/s): up to MEASUREMENT_LATENCY earlier or later. The audit's `seen`."""
    reach = np.abs(joint_vel) * MEASUREMENT_LATENCY
    return np.stack([joint_pos - reach, joint_pos + reach])
