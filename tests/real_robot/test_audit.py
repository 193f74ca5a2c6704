"""The protocol peers' audit (`peers.audit.TargetAudit`): every kind of unsafe command is caught, targets within
the documented tolerances pass, and it reports counts, events and the first violation as the peers' facts carry
them. Pure numpy: no peer, no timing."""

from __future__ import annotations

import ast
import inspect

import numpy as np
import pytest

from policyforge.real_robot.feetech import (
    RAD_PER_STEP,
    SO100_MOTORS,
    FeetechArm,
    FeetechConfig,
    MotorCalibration,
    save_calibration,
)
from policyforge.real_robot.go2 import go2_spec
from policyforge.real_robot.peers import audit as audit_module
from policyforge.real_robot.peers.audit import (
    LIMIT_TOLERANCE,
    STEP_TOLERANCE,
    TORQUE_TOLERANCE,
    WORKSPACE_TOLERANCE,
    TargetAudit,
)
from policyforge.real_robot.robot import Command, RobotSpec
from policyforge.real_robot.testing.faults import audit_goals

J, MAX_STEP = 3, 0.1
ZERO = np.zeros(J)


def spec() -> RobotSpec:
    """Joints in [-1, 1] rad, 2 rad/s, 10 N·m; an end effector (`fk`) in the box [-0.5, 0.5]² × [0, 1] m."""
    return RobotSpec(
        name="test-arm", joint_names=("a", "b", "c"), position_low=np.full(J, -1.0), position_high=np.full(J, 1.0),
        max_velocity=np.full(J, 2.0), max_torque=np.full(J, 10.0), control_rate_hz=100.0, safe_mode="hold",
        workspace_low=np.array([-0.5, -0.5, 0.0]), workspace_high=np.array([0.5, 0.5, 1.0]),
    )  # fmt: skip


def fk(q: np.ndarray) -> np.ndarray:
    """A toy forward kinematics: the end effector at (0.4 q0, 0.4 q1, 0.2 + q2), below the floor for q2 < -0.2."""
    return np.array([0.4 * q[0], 0.4 * q[1], 0.2 + q[2]])


def at(*position: float, **arrays) -> Command:
    return Command(position=np.array(position, dtype=np.float64), **arrays)


def pd(*position: float, kp: float = 20.0, **arrays) -> Command:
    """A PD command (gains on every joint)."""
    return at(*position, kp=np.full(J, kp), kd=np.ones(J), **arrays)


def audited(commands: list[Command], joint_pos=ZERO, **kwargs) -> TargetAudit:
    audit = TargetAudit(spec(), MAX_STEP, fk)
    for command in commands:
        audit.check(command, joint_pos, **kwargs)
    return audit


def reasons_of_last(commands: list[Command], joint_pos=ZERO, **kwargs) -> list[str]:
    audit = audited(commands[:-1], joint_pos, **kwargs)
    return audit.check(commands[-1], joint_pos, **kwargs)


EDGE = 1.0
STEP = MAX_STEP + STEP_TOLERANCE
"""The largest step allowed, rad."""
OVER, UNDER = 1.5, 0.5
"""Beyond a tolerance by half of it, and within it by half of it."""


# each case: the commands (the last one is judged; the joints at 0) and its reasons
CASES = {
    "NaN position": ([at(np.nan, 0, 0)], ["nonfinite"]),
    "inf velocity": ([at(0, 0, 0, velocity=np.array([0, np.inf, 0]))], ["nonfinite"]),
    "NaN torque": ([at(0, 0, 0, torque=np.array([np.nan, 0, 0]))], ["nonfinite"]),
    "NaN kp": ([at(0, 0, 0, kp=np.array([1.0, np.nan, 1.0]), kd=np.ones(J))], ["nonfinite"]),
    "inf kd": ([at(0, 0, 0, kp=np.ones(J), kd=np.array([1.0, 1.0, -np.inf]))], ["nonfinite"]),
    "NaN end-effector target": ([at(0, 0, 0, ee_target=np.array([0.0, np.nan, 0.5]))], ["nonfinite"]),
    "finite everything": ([at(0, 0, 0, velocity=ZERO, torque=ZERO, ee_target=np.array([0, 0, 0.5]))], []),
    # joint limits, from a previous target at the limit (no step)
    "beyond the joint limit": ([at(EDGE, 0, 0), at(EDGE + OVER * LIMIT_TOLERANCE, 0, 0)], ["position_limit"]),
    "at the limit, within tolerance": ([at(EDGE, 0, 0), at(EDGE + UNDER * LIMIT_TOLERANCE, 0, 0)], []),
    "below the lower limit": ([at(0, -EDGE, 0), at(0, -EDGE - OVER * LIMIT_TOLERANCE, 0)], ["position_limit"]),
    "a damped joint's target is not tracked": ([pd(0, 0, 0), pd(3.0, 0, 0, kp=0.0)], []),
    # steps, from the previous target
    "a step beyond max_step": ([at(0, 0, 0), at(0, STEP + 1e-4, 0)], ["step_limit"]),
    "a step of max_step + tolerance": ([at(0, 0, 0), at(0, STEP - 1e-4, 0)], []),
    "a step down beyond max_step": ([at(0.5, 0, 0), at(0.5 - STEP - 1e-4, 0, 0)], ["step_limit"]),
    "a NaN target is no reference": ([at(0, 0, 0), at(np.nan, 0, 0), at(STEP + 1e-4, 0, 0)], ["step_limit"]),
    # an arm's jump is a jump, also back to the joint; a PD target moving towards the joint lowers the torque
    "an arm's target jumping back to the joint": ([at(0.2, 0, 0), at(0.0, 0, 0)], ["step_limit"]),
    "a PD target jumping towards the joint": ([pd(0.2, 0, 0), pd(-0.2, 0, 0)], []),
    "a PD target jumping away from the joint": ([pd(0.2, 0, 0), pd(0.2 + STEP + 1e-4, 0, 0)], ["step_limit"]),
    # torque (kp = 20 N·m/rad, 10 N·m allowed) and velocity (2 rad/s), from a previous target in the same place
    "PD torque beyond the motor's limit": ([pd(0, 0, 0.5 * (1 + OVER * TORQUE_TOLERANCE))] * 2, ["torque_limit"]),
    "PD torque within tolerance": ([pd(0, 0, 0.5 * (1 + UNDER * TORQUE_TOLERANCE))] * 2, []),
    "feed-forward plus PD torque beyond it": ([pd(0, 0, 0.1, torque=np.array([0, 0, 8.6]))] * 2, ["torque_limit"]),
    "feed-forward torque alone": (
        [at(0, 0, 0, torque=np.array([0, 10.0 * (1 + OVER * TORQUE_TOLERANCE), 0]))],
        ["torque_limit"],
    ),
    "velocity beyond the maximum": (
        [at(0, 0, 0, velocity=np.array([0, -2.0 - OVER * LIMIT_TOLERANCE, 0]))],
        ["velocity_limit"],
    ),
    "velocity within tolerance": ([at(0, 0, 0, velocity=np.array([0, 2.0 + UNDER * LIMIT_TOLERANCE, 0]))], []),
    # workspace: fk(q) = (0.4 q0, 0.4 q1, 0.2 + q2) in the box [-0.5, 0.5]² × [0, 1]
    "forward kinematics below the floor": (
        [at(0, 0, -0.2), at(0, 0, -0.2 - OVER * WORKSPACE_TOLERANCE)],
        ["workspace"],
    ),
    "forward kinematics on the floor, within tolerance": (
        [at(0, 0, -0.2), at(0, 0, -0.2 - UNDER * WORKSPACE_TOLERANCE)],
        [],
    ),
    "a Cartesian target outside the box": ([at(0, 0, 0, ee_target=np.array([0.0, 0.0, -0.01]))], ["workspace"]),
    "a Cartesian target on the box, within tolerance": (
        [at(0, 0, 0, ee_target=np.array([0.5 + UNDER * WORKSPACE_TOLERANCE, 0.0, 0.0]))],
        [],
    ),
    "several reasons at once": (
        [at(0, 0, 0), at(0, 0, 1.5, velocity=np.full(J, 3.0))],
        ["position_limit", "step_limit", "velocity_limit", "workspace"],
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_each_kind_of_unsafe_command_is_caught_and_a_safe_one_passes(name):
    commands, reasons = CASES[name]
    assert reasons_of_last(commands) == reasons


def test_every_reason_is_exercised_unsafe_and_safe():
    """The table covers every check (dropping one fails its cases), and each with a safe case at its tolerance."""
    caught = {reason for _, reasons in CASES.values() for reason in reasons}
    assert caught == {"nonfinite", "position_limit", "step_limit", "torque_limit", "velocity_limit", "workspace"}


def test_the_tolerances_hold_the_wire_rounding_and_nothing_a_robot_would_feel():
    """In absolute numbers, not the constants: the Go2's float32 LowCmd at its limits passes; 0.1 mrad beyond a
    limit, a step 10% over max_step, 6% over the torque limit and 10 µm outside the box are caught."""
    go2 = go2_spec()
    up = lambda x: np.nextafter(np.float32(x), np.float32(np.inf)).astype(np.float64)  # noqa: E731
    stiff = np.full(12, 1e-3)  # tracking, with negligible torque
    at_limits = Command(position=up(go2.position_high), velocity=up(go2.max_velocity), kp=stiff, kd=np.zeros(12))
    assert TargetAudit(go2, MAX_STEP).check(at_limits, go2.position_high) == []
    assert reasons_of_last([at(EDGE, 0, 0), at(EDGE + 1e-4, 0, 0)]) == ["position_limit"]
    assert reasons_of_last([at(0, 0, 0), at(1.1 * MAX_STEP + 1e-6, 0, 0)]) == ["step_limit"]
    assert reasons_of_last([pd(0, 0, 1.06 * 0.5)] * 2) == ["torque_limit"]
    assert reasons_of_last([at(0, 0, -0.2), at(0, 0, -0.2 - 1e-5)]) == ["workspace"]


def test_a_step_may_cover_the_commands_lost_in_transit():
    assert reasons_of_last([at(0, 0, 0), at(2 * MAX_STEP + STEP_TOLERANCE - 1e-4, 0, 0)], lost=1) == []
    assert reasons_of_last([at(0, 0, 0), at(2 * MAX_STEP + STEP_TOLERANCE + 1e-4, 0, 0)], lost=1) == ["step_limit"]


def test_without_a_previous_target_the_step_is_measured_from_the_joint_as_the_sender_saw_it():
    joint = np.array([0.3, 0.0, 0.0])
    seen = np.array([[0.1, 0.0, 0.0], [0.2, 0.0, 0.0]])  # published earlier: the joint was moving up
    first = lambda target, **kw: TargetAudit(spec(), MAX_STEP).check(at(*target), joint, **kw)  # noqa: E731
    assert first((0.3 + STEP - 1e-4, 0, 0)) == []
    assert first((0.3 + STEP + 1e-4, 0, 0)) == ["step_limit"]
    assert first((0.1 - STEP + 1e-4, 0, 0), seen=seen) == []  # within max_step of a position it may have read
    assert first((0.1 - STEP - 1e-4, 0, 0), seen=seen) == ["step_limit"]
    # no joint measured (the Franka and Feetech audits): a first target has no reference
    assert TargetAudit(spec(), MAX_STEP).check(at(0.9, 0, 0)) == []


def test_a_restart_or_a_damped_joint_steps_from_the_joint_again():
    audit = TargetAudit(spec(), MAX_STEP)
    audit.check(at(0, 0, 0), ZERO)
    joint = np.array([0.5, 0.0, 0.0])  # the joint moved on (another motion) while no servo session ran
    audit.restart()
    assert audit.check(at(0.5 + STEP - 1e-4, 0, 0), joint) == []
    # a PD joint damped (kp = 0) since its last target: its next stiff target steps from the joint, not the target
    audit = TargetAudit(spec(), MAX_STEP)
    audit.check(pd(0, 0, 0), ZERO)
    audit.check(pd(0, 0, 0, kp=0.0), joint)
    assert audit.check(pd(0.5, 0, 0, kp=1.0), joint) == []
    assert audit.check(pd(0.5 + STEP + 1e-4, 0, 0, kp=1.0), joint) == ["step_limit"]


def test_counts_events_and_the_first_violation_as_the_peers_report_them():
    """The UR test's sequence (tests/real_robot/test_ur.py): held targets, then a far jump and a NaN that bypassed
    the filter. The facts: targets checked, counts by reason, the first unsafe command with its reference."""
    audit = TargetAudit(spec(), MAX_STEP)
    here = np.array([0.1, -0.2, 0.3])
    for position in [here] * 3:
        audit.check(Command(position=position), here)
    jump, nan = Command(position=here + 0.5), Command(position=np.full(J, np.nan))
    assert audit.check(jump, here) == ["step_limit"] and audit.check(nan, here) == ["nonfinite"]
    assert audit.targets == 5 and audit.unsafe == {"step_limit": 1, "nonfinite": 1}
    assert audit.events == [["step_limit"], ["nonfinite"]] and audit.unsafe_commands == 2
    first = audit.first
    assert first["reasons"] == ["step_limit"] and first["lost_before"] == 0
    np.testing.assert_array_equal(first["command"]["position"], here + 0.5)
    np.testing.assert_array_equal(first["joint_pos"], here)
    np.testing.assert_array_equal(first["previous"][0], here)  # the reference it stepped from
    # one command, several reasons: each counted, one event
    audit.check(Command(position=np.array([5.0, 0.0, 0.0])), here)
    assert audit.events[-1] == ["position_limit", "step_limit"] and audit.unsafe["step_limit"] == 2
    assert audit.first["reasons"] == ["step_limit"]  # the first stays the first


def test_a_pd_command_without_the_joint_is_refused():
    with pytest.raises(ValueError, match="needs joint_pos"):
        TargetAudit(spec(), MAX_STEP).check(pd(0, 0, 0))


def test_feetech_goals_are_audited_in_radians_against_the_calibrated_range(tmp_path):
    ids = [1, 2, 3, 4, 5, 6]
    calibration = {m: MotorCalibration(i, 2048, 1248, 2848) for m, i in zip(SO100_MOTORS, ids, strict=True)}
    save_calibration(tmp_path / "so100.json", calibration)
    arm = FeetechArm(FeetechConfig(port="unused", calibration=tmp_path / "so100.json"))
    writes = lambda *goals: [(servo, raw) for goal in goals for servo, raw in zip(ids, goal, strict=True)]  # noqa: E731
    step_raw = int((MAX_STEP + STEP_TOLERANCE) / RAD_PER_STEP)  # the largest whole step allowed
    safe = writes([2048] * 6, [2048 + step_raw] + [2048] * 5, [2048 + step_raw] * 6)
    audit = audit_goals(safe, arm, MAX_STEP)
    assert audit.targets == 3 and audit.unsafe == {}
    jump = audit_goals(writes([2048] * 6, [2048 + step_raw + 1] + [2048] * 5), arm, MAX_STEP)
    assert jump.unsafe == {"step_limit": 1}
    beyond = audit_goals(writes([2848] * 6, [2849] + [2848] * 5, [1247] * 6), arm, MAX_STEP)
    assert beyond.unsafe == {"position_limit": 2, "step_limit": 1}  # 2849 → 1247: a jump as well
    with pytest.raises(RuntimeError, match="different numbers of goals"):
        audit_goals(writes([2048] * 6)[:-1], arm, MAX_STEP)


def test_the_audit_shares_no_code_with_the_safety_filter():
    """The audit is the oracle that checks the filter: it imports only numpy, the standard library and the data
    types of robot.py, never safety.py (nor anything that does)."""
    tree = ast.parse(inspect.getsource(audit_module))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert imported == {"__future__", "dataclasses", "collections.abc", "numpy", "policyforge.real_robot.robot"}


def test_joint_targets_that_lead_an_arm_outside_the_box_back_are_safe_and_further_out_are_not():
    """The arm at q2 = -0.3 (end effector 10 cm under the floor, e.g. after a stopping distance): a target 5 cm
    under it is the way back, one 15 cm under it is not; the same target with the arm inside the box leaves it."""
    below = np.array([0.0, 0.0, -0.3])
    assert reasons_of_last([at(0, 0, -0.3), at(0, 0, -0.25)], joint_pos=below) == []
    assert reasons_of_last([at(0, 0, -0.3), at(0, 0, -0.35)], joint_pos=below) == ["workspace"]
    assert reasons_of_last([at(0, 0, -0.3), at(0, 0, -0.3)], joint_pos=below) == ["workspace"]  # no nearer
    assert reasons_of_last([at(0, 0, -0.2), at(0, 0, -0.25)], joint_pos=np.array([0.0, 0.0, -0.2])) == ["workspace"]
