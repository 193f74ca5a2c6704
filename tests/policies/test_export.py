"""`export_checked`: an export is written only when its actions and act()'s are finite and agree; each exported
file's own description records the graph's sha256 and the checkpoint it came from (`stale_reason` tells an
out-of-date export) and lets a deployer drive the graph without policyforge; both formats refuse inputs of the
wrong shape, naming the expected one."""

import ast
import json
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

from policyforge.policies.encoders import EncoderConfig
from policyforge.policies.export import (
    ExportError,
    check_observations,
    describe_source,
    export,
    export_checked,
    file_sha256,
    load_exported,
    max_export_error,
    stale_reason,
)
from policyforge.policies.export_description import DescriptionError, description_path, load_description
from policyforge.policies.residual import ResidualConfig, ResidualPolicy
from policyforge.policies.rollout import ChunkedActor
from tests.policies.test_policy_contract import IMAGE_SHAPE, OBS_DIM, diffusion, flow, gaussian, observations


def test_a_finite_policy_is_exported_with_its_graphs_sha256_and_source(tmp_path):
    policy, checkpoint = gaussian().eval(), tmp_path / "latest.pt"
    checkpoint.write_bytes(b"weights v1")
    source = describe_source(checkpoint, tmp_path)
    path = tmp_path / "export" / "policy.onnx"
    error = export_checked(policy, path, "onnx", observations(policy), {"source": source})
    spec = json.loads(description_path(path).read_text())
    assert error <= 1e-5 and spec["graph_sha256"] == file_sha256(path)
    assert spec["source"] == {"checkpoint": "latest.pt", "sha256": file_sha256(checkpoint), "bytes": 10}
    assert sorted(p.name for p in path.parent.iterdir()) == ["policy.onnx", "policy.onnx.json"]  # no staging left
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
    assert not path.exists() and not list(path.parent.glob("*.json"))


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
        "policy.onnx",
        "policy.onnx.json",
        "policy_base.onnx",
        "policy_base.onnx.json",
    ]
    assert stale_reason(path, checkpoint, tmp_path) is None
    base = path.with_name("policy_base.onnx")
    base.write_bytes(base.read_bytes()[:-1])
    assert "policy_base.onnx is missing or is not the graph" in stale_reason(path, checkpoint, tmp_path)


def test_each_exported_file_has_its_own_description(tmp_path):
    policy = gaussian().eval()
    obs = observations(policy)
    for fmt, name in (("onnx", "policy.onnx"), ("torchscript", "policy.pt")):
        export_checked(policy, tmp_path / name, fmt, obs)
    for fmt, name in (("onnx", "policy.onnx"), ("torchscript", "policy.pt")):  # after both: each still its own
        spec = json.loads((tmp_path / f"{name}.json").read_text())
        assert spec["format"] == fmt and spec["graph_sha256"] == file_sha256(tmp_path / name)
    assert not (tmp_path / "policy.json").exists()


def test_an_older_shared_description_is_read_for_its_format_and_refused_for_the_other(tmp_path):
    """Exports of older policyforge versions wrote one policy.json for both formats (the last one exported)."""
    policy = gaussian().eval()
    onnx_path = export(policy, tmp_path / "policy.onnx", "onnx")
    torchscript_path = export(policy, tmp_path / "policy.pt", "torchscript")
    legacy = json.loads(description_path(torchscript_path).read_text())
    for path in (onnx_path, torchscript_path):
        description_path(path).unlink()
    (tmp_path / "policy.json").write_text(json.dumps(legacy))  # the shared file, last written by the .pt export
    assert load_description(torchscript_path)["format"] == "torchscript"
    with pytest.raises(DescriptionError, match=r"policy.json describes a torchscript export, not policy.onnx \(onnx\)"):
        load_description(onnx_path)
    export_checked(policy, onnx_path, "onnx", observations(policy))  # writes policy.onnx.json, keeps the .pt's
    assert load_description(onnx_path)["format"] == "onnx" and (tmp_path / "policy.json").exists()
    export_checked(policy, torchscript_path, "torchscript", observations(policy))
    # the new description is read; the older file is left as it was (nothing marks it as policyforge's to delete)
    assert load_description(torchscript_path)["graph_sha256"] == file_sha256(torchscript_path)
    assert (tmp_path / "policy.json").read_text() == json.dumps(legacy)


def test_the_description_lays_out_images_and_a_residuals_base_action(tmp_path):
    policy = flow(image_shape=IMAGE_SHAPE, encoder=EncoderConfig(image_channels=8, image_features=16)).eval()
    spec = json.loads(
        description_path(export(policy, tmp_path / "p.pt", "torchscript", {"cameras": ["wrist"]})).read_text()
    )
    image = spec["observation"]["image"]
    assert list(spec["observation"]) == ["obs", "image"]  # graph-input order
    assert image["shape"] == ["B", 2, *IMAGE_SHAPE] and image["dtype"] == "uint8" and image["cameras"] == ["wrist"]
    assert image["axes"] == ["batch", "history", "camera", "height", "width", "rgb"]
    residual = ResidualPolicy(diffusion(), OBS_DIM, ResidualConfig(hidden=[32, 32], per_step=True)).eval()
    spec = json.loads(description_path(export(residual, tmp_path / "r.pt", "torchscript")).read_text())
    assert spec["observation"]["base_action"]["shape"] == ["B", 3] and spec["base"] == "r_base.pt"
    assert spec["n_obs_steps"] == 0 and spec["act_steps"] == spec["chunk_len"] == 1
    base = json.loads(description_path(tmp_path / "r_base.pt").read_text())
    assert base["n_obs_steps"] == 2 and base["chunk_len"] == 4 and base["act_steps"] == 2


@pytest.mark.parametrize("fmt,suffix", [("onnx", ".onnx"), ("torchscript", ".pt")])
def test_exported_graphs_refuse_wrong_input_shapes_naming_the_expected_shape(tmp_path, fmt, suffix):
    """A TorchScript graph traced for [B, 7] used to run on [B, 1, 7] and answer [B, 1, 1, 3]."""
    policy = gaussian().eval()
    path = export(policy, tmp_path / f"policy{suffix}", fmt)
    run = load_exported(path)
    assert run(np.zeros((3, OBS_DIM), np.float32)).shape == (3, 1, 3)
    wrong = {"rank": np.zeros((2, 1, OBS_DIM), np.float32), "size": np.zeros((2, OBS_DIM - 1), np.float32)}
    for shape in wrong.values():
        with pytest.raises(
            ValueError, match=rf"^policy{suffix}: input 'obs' must be \[B, 7\] float32 \(B ≥ 1\), got \["
        ):
            run(shape)
    if fmt == "torchscript":  # the check is inside the saved graph (a C++ deployment loading it gets it too)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            module = torch.jit.load(str(path))
        with pytest.raises(torch.jit.Error, match=r"input 'obs' must be \[B, 7\] float32 \(B ≥ 1\), got \[2, 1, 7\]"):
            module(torch.as_tensor(wrong["rank"]))


def test_check_observations_spread_like_the_training_data():
    policy = gaussian().eval()
    observations(policy)  # normaliser statistics near mean 3, std 2
    state = check_observations(policy, 4096)["policy"]
    mean, std = policy.normalizer.mean.float(), policy.normalizer.var.sqrt().float()
    torch.testing.assert_close(state.mean(0), mean, atol=0.1 * float(std.max()), rtol=0)
    torch.testing.assert_close(state.std(0), std, atol=0.1 * float(std.max()), rtol=0)
    residual = ResidualPolicy(diffusion(), OBS_DIM, ResidualConfig(hidden=[32, 32], per_step=True))
    base_action = check_observations(residual, 2048)["base_action"]
    assert float(base_action.min()) >= -1 and float(base_action.max()) <= 1 and float(base_action.std()) > 0.5


DEPLOYER = """\
import json

import numpy as np
import onnxruntime

spec = json.load(open("policy.onnx.json"))
assert spec["history"]["order"] == "oldest_first" and spec["history"]["episode_start"] == "repeat_first"
[(name, state)] = spec["observation"].items()  # this policy's one input: the state
session = onnxruntime.InferenceSession("policy.onnx")
history_len, act_steps, actions = spec["n_obs_steps"], spec["act_steps"], []
for episode in np.load("observations.npy"):  # raw observations [episodes, steps, D]
    history = []
    for step, obs in enumerate(episode.astype(state["dtype"])):
        # the last n_obs_steps observations, oldest first; an episode's first one fills them all
        history = [obs] * max(history_len, 1) if not history else history[1:] + [obs]
        if step % act_steps == 0:  # plan a chunk [H, A]; its first act_steps actions are executed
            inputs = np.stack(history)[None] if history_len else obs[None]
            chunk = session.run([spec["action"]["graph_output"]], {name: inputs})[0][0]
        actions.append(chunk[step % act_steps])
np.save("actions.npy", np.stack(actions))
"""
"""A deployer's whole program: numpy, json and onnxruntime, and what the export's description says."""


@pytest.mark.parametrize("make", [gaussian, flow], ids=["gaussian", "flow_history_2_chunks_of_4_act_2"])
def test_the_description_alone_lets_an_onnxruntime_script_reproduce_act(tmp_path, make):
    torch.manual_seed(3)
    policy = make().eval()
    observations(policy)  # non-trivial normaliser statistics (inside the graph)
    export_checked(policy, tmp_path / "policy.onnx", "onnx", check_observations(policy))
    raw = 3 + 2 * np.random.default_rng(5).standard_normal((2, 7, OBS_DIM)).astype(np.float32)
    np.save(tmp_path / "observations.npy", raw)
    actor, expected = ChunkedActor(policy, 1), []  # how policyforge drives the policy in the simulator
    for number, episode in enumerate(raw):
        if number:  # 7 steps: the episode ends mid-chunk
            actor.episodes_ended(torch.ones(1, dtype=torch.bool))
        expected += [actor({policy.obs_key: torch.as_tensor(obs)[None]})[0].numpy() for obs in episode]
    script = tmp_path / "deploy.py"
    script.write_text(DEPLOYER)
    imported = {a.name for n in ast.walk(ast.parse(DEPLOYER)) if isinstance(n, ast.Import) for a in n.names}
    assert len(DEPLOYER.splitlines()) <= 30 and imported == {"json", "numpy", "onnxruntime"}
    assert not any(isinstance(n, ast.ImportFrom) for n in ast.walk(ast.parse(DEPLOYER)))
    done = subprocess.run([sys.executable, "-I", str(script)], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    actions = np.load(tmp_path / "actions.npy")
    assert actions.shape == (14, 3) and np.abs(actions - np.stack(expected)).max() <= 1e-5
    assert np.abs(np.diff(actions, axis=0)).max() > 1e-3  # the actions follow the observations


def test_an_onnx_export_prints_nothing_about_torch_internals(tmp_path):
    """torch's exporter tells the user that torchvision is missing and warns about its own pytree API: noise to a
    user exporting a policy. A fresh process, for the exporter says it once per process."""
    script = (
        "import sys; from tests.policies.test_policy_contract import gaussian; "
        "from policyforge.policies.export import export; export(gaussian().eval(), sys.argv[1], 'onnx')"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "policy.onnx")], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "policy.onnx").is_file()
    assert "torchvision" not in done.stderr and "Warning" not in done.stderr, done.stderr
