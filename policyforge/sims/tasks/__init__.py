"""Tasks: each an MJCF model in `sims/assets` plus pure batched functions (see `sims/task.py`)."""

from policyforge.sims.task import Task
from policyforge.sims.tasks.arm_instructed import ArmInstructed
from policyforge.sims.tasks.arm_tasks import ArmLiftCube, ArmPushCube, ArmReach
from policyforge.sims.tasks.pendulum import PendulumSwingup
from policyforge.sims.tasks.quadruped import QuadrupedWalk

TASKS: dict[str, type[Task]] = {
    cls.name: cls for cls in (PendulumSwingup, ArmReach, ArmPushCube, ArmLiftCube, ArmInstructed, QuadrupedWalk)
}
"""Registered tasks by name."""

__all__ = ["TASKS", "ArmInstructed", "ArmLiftCube", "ArmPushCube", "ArmReach", "PendulumSwingup", "QuadrupedWalk"]
