"""Simulated robots that speak the real robots' protocols on the loopback, for driver tests and dry runs, and the
audit (`audit.TargetAudit`) that counts the unsafe commands reaching them: the oracle of the safety filter."""
