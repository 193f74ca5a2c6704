"""Joint motion generators: what a robot's own controller does between a policy's target and its motors.

A Franka driven through franky never tracks a policy's joint target directly: each target starts a new motion
(ruckig) from the current desired state, limited in velocity, acceleration and jerk (scaled by franky's
`relative_dynamics_factor`) and ending at rest on the target. A simulated arm whose stiff PD jumps to each target
accelerates 5–10× faster than that, so a policy trained on it overshoots on the robot. `limited_motion` is the
batched, per-joint time-optimal law the simulated arm runs instead, at the control rate:

- the reference moves towards the target as fast as the limits allow and still stops on it, with
  acceleration ≤ a_max and speed ≤ v_max (semi-implicit Euler: the step's new velocity moves the position, and the
  fastest such velocity that can still brake to rest on the target in whole steps of a_max·dt is taken);
- jerk is not modelled: at the control rates of the arm tasks (≤ 250 Hz) one step's jerk budget j·dt is larger
  than the whole acceleration range 2·a_max for every Franka joint (j·dt ≥ 7500·0.004 = 30 > 2·15), so the jerk
  limit cannot bind;
- joints arrive together, as ruckig's time synchronisation makes them: the slowest joint's time T to its target
  sets every other joint's cruise speed, the one whose trapezoid (at full acceleration) also takes T (measured on
  franky-sim: a joint synchronised so cruises at 0.852 rad/s, as this gives, not at its 1.09 rad/s limit).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from policyforge.sims.task import Array, Xp


@dataclasses.dataclass(frozen=True)
class JointMotionLimits:
    """Per-joint limits of a robot's motion generator, at full dynamics."""

    velocity: np.ndarray
    """Velocity limits [J], rad/s."""
    acceleration: np.ndarray
    """Acceleration limits [J], rad/s²."""
    jerk: np.ndarray
    """Jerk limits [J], rad/s³ (recorded for reference; see the module docstring)."""

    def scaled(self, factor: float, acceleration_fraction: float = 1.0) -> JointMotionLimits:
        """The limits at a fraction of the full dynamics (franky's `relative_dynamics_factor`), accelerations at a
        further fraction of that."""
        acceleration = self.acceleration * factor * acceleration_fraction
        return JointMotionLimits(self.velocity * factor, acceleration, self.jerk * factor)


FRANKA_LIMITS = JointMotionLimits(
    velocity=np.array([2.175, 2.175, 2.175, 2.175, 2.61, 2.61, 2.61]),
    acceleration=np.array([15.0, 7.5, 10.0, 12.5, 15.0, 20.0, 20.0]),
    jerk=np.array([7500.0, 3750.0, 5000.0, 6250.0, 7500.0, 10000.0, 10000.0]),
)
"""franky's joint limits for a Panda/FR3 (`Robot.joint_velocity_limit` etc., read from franky-control 1.1 on
franky-sim)."""


def limited_motion(
    position: Array, velocity: Array, target: Array, limits: JointMotionLimits, dt: float, xp: Xp
) -> tuple[Array, Array]:
    """One control step of the motion generator: the reference position and velocity [N, J] after `dt` seconds,
    from the reference `position`, `velocity` [N, J] towards `target` [N, J] (to be reached at rest)."""
    a_max, v_max = xp.asarray(limits.acceleration), xp.asarray(limits.velocity)
    error = target - position
    direction = xp.where(error < 0, -1.0, 1.0)
    distance, speed = xp.abs(error), velocity * direction  # along the way to the target
    cruise = synchronised_speed(distance, speed, a_max, v_max, xp)
    # the fastest speed v that can still stop on the target braking by a·dt per step: v·dt/2 + v²/(2a) ≤ d
    # (the distance covered by v, then v − a·dt, …, 0), and one that does not pass the target within the step
    a_dt = a_max * dt
    stoppable = (xp.sqrt(a_dt**2 + 8.0 * a_max * distance) - a_dt) / 2.0
    wanted = xp.minimum(xp.minimum(stoppable, distance / dt), cruise)
    new_speed = xp.clip(xp.clip(wanted, speed - a_dt, speed + a_dt), -v_max, v_max)
    return position + direction * new_speed * dt, direction * new_speed


def synchronised_speed(distance: Array, speed: Array, a_max: Array, v_max: Array, xp: Xp) -> Array:
    """Cruise speed [N, J] of each joint for all to reach their targets (`distance` [N, J] away, moving at `speed`
    [N, J] towards them) in the same time: that of the slowest joint. A joint accelerating at speed v is where a
    rest-to-rest profile is after v/a seconds, d + v²/(2a) from its target; from rest, a distance d takes
    T = d/v_max + v_max/a (trapezoid) or 2·√(d/a) (triangle), and the trapezoid of duration T at cruise speed c
    covers d = c·(T − c/a)."""
    moving = xp.maximum(speed, 0.0)
    virtual = distance + moving**2 / (2.0 * a_max)  # the distance from rest, and the time already spent on it
    spent = moving / a_max
    trapezoid = virtual >= v_max**2 / a_max
    duration = xp.where(trapezoid, virtual / v_max + v_max / a_max, 2.0 * xp.sqrt(virtual / a_max)) - spent
    total = xp.max(duration, axis=-1, keepdims=True) + spent
    root = xp.sqrt(xp.maximum((a_max * total) ** 2 - 4.0 * a_max * virtual, 0.0))
    return xp.minimum((a_max * total - root) / 2.0, v_max)
