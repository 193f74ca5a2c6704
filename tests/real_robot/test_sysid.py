"""System identification: the simulated Go2's joint model fitted, through the DDS driver and the safety filter,
to a hanging peer with known joint parameters recovers them (`real_robot.sysid`, `policyforge bench sysid`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from policyforge.bench.sysid import KNOWN, record_from_peer
from policyforge.config import ConfigError
from policyforge.real_robot.peers.go2_model import JointPhysics
from policyforge.real_robot.sysid import Excitation, Recording, fit, replay_error


def test_the_fit_recovers_a_peers_known_joint_parameters(tmp_path):
    recording = record_from_peer(KNOWN, Excitation(seconds=4.0), tmp_path)
    recording.save(tmp_path / "recording.npz")
    recording = Recording.load(tmp_path / "recording.npz")
    fitted = fit(recording, evaluations=300)
    physics, model_error = fitted.physics, replay_error(recording, JointPhysics())
    assert fitted.error_rad < model_error / 5, (fitted, model_error)  # go2.xml's joints replay it far worse
    assert physics.damping == pytest.approx(KNOWN.damping, rel=0.2), physics
    assert physics.motor_strength == pytest.approx(KNOWN.motor_strength, rel=0.1), physics
    assert physics.command_delay == pytest.approx(KNOWN.command_delay, abs=0.004), physics
    assert physics.armature == pytest.approx(KNOWN.armature, rel=0.5), physics
    assert physics.frictionloss == pytest.approx(KNOWN.frictionloss, abs=0.1), physics


def test_a_recording_is_read_without_unpickling_and_a_foreign_file_is_refused(tmp_path):
    np.savez(tmp_path / "other.npz", joint_pos=np.zeros((3, 12)))
    with pytest.raises(ConfigError, match=r"recording: .*other.npz is not a sysid recording: it lacks \['command_kd'"):
        Recording.load(tmp_path / "other.npz")
    fields = {field.name: np.zeros(2) for field in dataclasses.fields(Recording)}
    np.savez(tmp_path / "pickled.npz", **{**fields, "joint_pos": np.array([object()], dtype=object)})
    with pytest.raises(ValueError, match="allow_pickle=False"):
        Recording.load(tmp_path / "pickled.npz")
