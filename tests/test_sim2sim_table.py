"""bench sim2sim-table (issue 24) on the shipped walking policy for 2 s a cell: every column measured, each
held-out model's error beside their mean, per-seed cells kept, and the worst loss against the training simulator."""

from __future__ import annotations

import math

import pytest

from policyforge.bench.sim2sim_table import HELD_OUT, quadruped_row, quadruped_table
from tests.real_robot.conftest import GO2_POLICY


def test_a_row_measures_every_column_for_each_seed_and_its_worst_loss():
    lines = []
    row = quadruped_row([GO2_POLICY, GO2_POLICY], 2.0, None, say=lines.append)
    assert len(row["seeds"]) == 2 and len(lines) == 2
    for cells in row["seeds"]:
        assert 0.0 < cells["train"] < 0.15 and cells["train_falls"] == 0
        assert cells["heldout"] == pytest.approx(sum(cells[name] for name in HELD_OUT) / len(HELD_OUT))
        assert not math.isnan(cells["go2_peer"])
    # the action latency model is in force: this policy, trained without latency, tracks worse with 20 ms of it
    assert row["+20 ms latency"] > 1.2 * row["train"]
    held_out = [row[name] for name in (*HELD_OUT, "go2_peer")]
    assert row["worst_loss"] == pytest.approx(max(held_out) / row["train"] - 1.0)
    assert row["std"]["train"] == pytest.approx(0.0, abs=1e-9)  # the same export twice: simulation is deterministic
    assert quadruped_table({"a": row}, 2.0).row_count == 1
