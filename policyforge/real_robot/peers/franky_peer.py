"""franky-sim (a MuJoCo FR3 serving libfranka's protocol on 127.0.0.1), reporting the end-effector pose of the
measured joints as a Franka does.

franky-sim 1.0.4's `BaseRobot.kinematics` returns pinocchio's `data.oMf[tcp]`, a reference into pinocchio's data,
not a copy. The state's O_T_EE (the pose of the measured joints q) is computed first, then O_T_EE_d (the pose of the
desired joints q_d) overwrites the same data, so the O_T_EE it sends is the *desired* pose: equal to the arm's at
rest, 4 cm ahead of it while it moves, and 30 cm away when the simulated arm lagged its trajectory on a loaded
machine (measured 2026-12-06: a deploy's verdict read an end effector 26 cm under the table while the measured
joints put it 1–5 cm above). Here the pose is copied before the next call overwrites it; the rest is franky-sim's
own `franky-sim` command (`python -m policyforge.real_robot.peers.franky_peer -s mujoco --hostname 127.0.0.1`).
"""

from __future__ import annotations

import sys


def report_measured_pose() -> None:
    """Make franky-sim's kinematics return a pose of its own (harmless once upstream copies it)."""
    from franky_sim.base_simulator import BaseRobot

    aliased = BaseRobot.kinematics
    BaseRobot.kinematics = lambda self, q: aliased(self, q).copy()


def main() -> int:
    from franky_sim.run_server import main as franky_sim_main

    report_measured_pose()
    sys.argv[0] = "franky-sim"
    return franky_sim_main()


if __name__ == "__main__":
    sys.exit(main())
