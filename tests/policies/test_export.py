"""`export_checked`: an export is written only when its actions and act()'s are finite and agree; the description
records the graph's sha256 and the checkpoint it came from (`stale_reason` tells an out-of-date export)."""

import json

import pytest
import torch

from policyforge.policies.export import (
    ExportError,
    describe_source,
    export_checked,
    file_sha256,
    max_export_error,
    stale_reason,
)
from policyforge.policies.residual import ResidualConfig, ResidualPolicy
from tests.policies.test_policy_contract import OBS_DIM, diffusion, gaussian, observations


def test_a_finite_policy_is_exported_with_its_graphs_sha256_and_source(tmp_path):
    policy, checkpoint = gaussian().eval(), tmp_path / "latest.pt"
    checkpoint.write_bytes(b"weights v1")
    source = describe_source(checkpoint, tmp_path)
    path = tmp_path / "export" / "policy.onnx"
    error = export_checked(policy, path, "onnx", observations(policy), {"source": source})
    spec = json.loads(path.with_suffix(".json").read_text())
    assert error <= 1e-5 and spec["graph_sha256"] == file_sha256(path)
    assert spec["source"] == {"checkpoint": "latest.pt", "sha256": file_sha256(checkpoint), "bytes": 10}
    assert sorted(p.name for p in path.parent.iterdir()) == ["policy.json", "policy.onnx"]  # no staging left
    assert stale_reason(path, checkpoint, tmp_path) is None
    checkpoint.write_bytes(b"weights v2")
    assert "it was exported from latest.pt (sha256 " in stale_reason(path, checkpoint, tmp_path)
    checkpoint.write_bytes(b"weights v1")
    path.write_bytes(path.read_bytes() + b"\0")  # a graph that is not the one described
    assert "policy.onnx is missing or is not the graph its description was written for" in stale_reason(
        path, checkpoint, tmp_path
    )


@pytest.mark.parametrize("poison", ["nan", "inf"])
def test_a_policy_with_non_finite_weights_is_not_exported(tmp_path, poison):
    policy = gaussian().eval()
    obs = observations(policy)
    with torch.no_grad():
        policy.net[0].weight[0, 0] = float(poison)
    path = tmp_path / "export" / "policy.onnx"
    with pytest.raises(ExportError) as refused:
        export_checked(policy, path, "onnx", obs, source="run (checkpoints/latest.pt)")
    message = str(refused.value)
    assert message.startswith("run (checkpoints/latest.pt): the policy's actions are not finite")
    assert "1 of its" in message and "weights are NaN/inf" in message and "nothing was exported" in message
    assert not path.exists() and not path.with_suffix(".json").exists()


def test_max_export_error_of_non_finite_actions_is_inf(tmp_path):
    policy = gaussian().eval()
    obs = observations(policy)
    path = tmp_path / "policy.onnx"
    export_checked(policy, path, "onnx", obs)
    with torch.no_grad():
        policy.net[0].weight.fill_(float("nan"))  # act() is NaN now, the graph is not
    assert max_export_error(policy, path, obs) == float("inf")  # > any tolerance (NaN compares false)


def test_a_per_step_residual_moves_its_base_graph_into_place_too(tmp_path):
    policy = ResidualPolicy(diffusion(), OBS_DIM, ResidualConfig(hidden=[32, 32], scale=0.3, per_step=True)).eval()
    checkpoint = tmp_path / "latest.pt"
    checkpoint.write_bytes(b"weights")
    path = tmp_path / "export" / "policy.onnx"
    metadata = {"source": describe_source(checkpoint, tmp_path)}
    export_checked(policy, path, "onnx", observations(policy), metadata)
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "policy.json",
        "policy.onnx",
        "policy_base.json",
        "policy_base.onnx",
    ]
    assert stale_reason(path, checkpoint, tmp_path) is None
    base = path.with_name("policy_base.onnx")
    base.write_bytes(base.read_bytes()[:-1])
    assert "policy_base.onnx is missing or is not the graph" in stale_reason(path, checkpoint, tmp_path)
