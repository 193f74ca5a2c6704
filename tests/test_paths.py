"""Names are names, not paths; nothing is deleted unless policyforge created it and marked it as its own."""

import json

import pytest

from policyforge.algos import run_files
from policyforge.algos.runner import RunConfig
from policyforge.cli import main
from policyforge.config import ConfigError, from_dict

TINY = [
    "sim.num_envs=4",
    "algo.rollout_steps=8",
    "runner.total_env_steps=32",
    "runner.eval_envs=1",
    "runner.video=none",
    "runner.tensorboard=false",
]


def tree(root):
    """Every path under root, relative, with file contents: a snapshot to compare before and after."""
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def printed(capsys) -> str:
    """What the CLI printed, with rich's line wrapping undone."""
    return " ".join(capsys.readouterr().out.split())


def sentinel(folder):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "precious.txt").write_text("not policyforge's")
    return folder / "precious.txt"


@pytest.mark.parametrize("name", ["..", ".", "../../x", "a/b", "/abs/dir", "a\\b", "run name", "ü"])
def test_a_run_name_is_one_plain_path_component(name):
    with pytest.raises(ConfigError, match=r"^name: must be a plain name") as error:
        from_dict(RunConfig, {"name": name})
    assert error.value.path == "name"


def test_plain_names_and_default_names_are_accepted():
    assert from_dict(RunConfig, {"name": "reach-v2_seed.3"}).run_dir.name == "reach-v2_seed.3"
    config = from_dict(RunConfig, {"sim": {"task": "gym:ALE/Pong-v5"}, "out_dir": "/tmp/runs"})
    assert str(config.run_dir) == "/tmp/runs/gym-ALE-Pong-v5-ppo"


def test_train_refuses_a_name_that_leaves_out_dir_before_writing_anything(tmp_path, capsys):
    (tmp_path / "runs").mkdir()
    before = tree(tmp_path)
    code = main(["train", "configs/arm-reach-ppo.yaml", f"out_dir={tmp_path / 'runs' / 'a'}", "name=../../x", *TINY])
    assert code == 2 and "name: must be a plain name" in printed(capsys)
    assert tree(tmp_path) == before


def test_demo_name_dot_dot_leaves_the_working_directory_alone(tmp_path, monkeypatch, capsys):
    precious = sentinel(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "name=..", *TINY]) == 2  # runs/.. is the working directory
    assert "name: must be a plain name" in printed(capsys)
    assert precious.read_text() == "not policyforge's"


def test_demo_name_absolute_leaves_that_directory_alone(tmp_path, capsys):
    precious = sentinel(tmp_path / "mine")
    assert main(["demo", f"name={tmp_path / 'mine'}", f"out_dir={tmp_path / 'runs'}", *TINY]) == 2
    assert precious.read_text() == "not policyforge's"
    assert not (tmp_path / "runs").exists()


def test_demo_refuses_a_directory_policyforge_did_not_create(tmp_path, capsys):
    precious = sentinel(tmp_path / "mine")
    before = tree(tmp_path)
    assert main(["demo", f"out_dir={tmp_path}", "name=mine", *TINY]) == 2
    assert f"no {run_files.MARKER}" in printed(capsys)
    assert tree(tmp_path) == before and precious.exists()


def test_demo_refuses_a_training_run(tmp_path, capsys):
    assert main(["train", "configs/arm-reach-ppo.yaml", f"out_dir={tmp_path}", "name=mine", *TINY]) == 0
    before = tree(tmp_path)
    assert main(["demo", f"out_dir={tmp_path}", "name=mine", *TINY]) == 2
    assert tree(tmp_path) == before
    assert "is a train run" in printed(capsys)
    assert json.loads((tmp_path / "mine" / run_files.MARKER).read_text())["kind"] == "train"


def test_demo_starts_afresh_but_only_over_its_own_files(tmp_path, capsys):
    demo = ["demo", f"out_dir={tmp_path}", *TINY]
    assert main(demo) == 0
    run = tmp_path / "demo"
    marker = json.loads((run / run_files.MARKER).read_text())
    assert marker["created_by"] == "policyforge" and marker["kind"] == "demo" and "version" in marker
    (run / "checkpoints" / "step_0000000099.pt").write_bytes(b"a stale checkpoint of the previous demo")
    assert main(demo) == 0  # the previous demo's files are replaced
    assert not (run / "checkpoints" / "step_0000000099.pt").exists() and (run / "checkpoints" / "latest.pt").exists()
    for precious in (sentinel(run), sentinel(run / "plots")):  # anything else in it: refused, nothing deleted
        before = tree(tmp_path)
        assert main(demo) == 2
        out = printed(capsys)
        assert "nothing was deleted" in out and str(precious.relative_to(run)) in out.replace("\n", "")
        assert tree(tmp_path) == before
        precious.unlink()
    assert main(demo) == 0


def test_a_run_does_not_start_in_a_directory_policyforge_did_not_create(tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.yaml").write_text("my own settings\n")
    assert main(["train", "configs/arm-reach-ppo.yaml", f"out_dir={tmp_path}", "name=mine", *TINY]) == 2
    assert "policyforge did not create it" in printed(capsys)
    assert [p.name for p in mine.iterdir()] == ["config.yaml"] and (
        mine / "config.yaml"
    ).read_text() == "my own settings\n"
