"""Demonstration data: scripted experts for the arm tasks (datasets in the LeRobot layout come next)."""
