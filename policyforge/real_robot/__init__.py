"""Real robots: the driver contract (`robot`), the safety filter between policy and driver (`safety`), the
fixed-rate control loop (`loop`), deployment of exported policies (`deploy`, `launch`; what it says: `progress`;
its command line: `deploy_cli`), drivers (`go2`) and the simulated protocol peers their tests run against
(`peers`, with the audit of what reached their motors). The fault-injection harness of the tests and bench/ lives
in `testing`, outside what a deployment runs. Drivers import their protocol libraries, so import them by module:
`from policyforge.real_robot.go2 import Go2`."""

from policyforge.real_robot.loop import ControlLoop, LoopConfig, LoopReport
from policyforge.real_robot.robot import Command, Robot, RobotSpec, RobotState
from policyforge.real_robot.safety import SafetyConfig, SafetyFilter

__all__ = [
    "Command",
    "ControlLoop",
    "LoopConfig",
    "LoopReport",
    "Robot",
    "RobotSpec",
    "RobotState",
    "SafetyConfig",
    "SafetyFilter",
]
