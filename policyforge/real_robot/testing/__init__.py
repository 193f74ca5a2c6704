"""Harnesses that test the real-robot stack, kept out of the runtime package: nothing a deployment runs imports
them. `faults` drives each driver and its simulated peer through the safety filter and the control loop with
adversarial policies and a misbehaving link (used by tests/real_robot/test_faults.py and bench/safety_fuzz.py).
Import by module: `from policyforge.real_robot.testing.faults import fuzz`."""
