"""Simulated robots that speak the real robots' protocols on the loopback, for driver tests and dry runs."""
