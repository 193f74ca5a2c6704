"""Training the learned reward model (`algo: reward_model`): its labels, a run through `policyforge train` that
fits progress and success (the figures of `rewards/metrics.py` rise from chance), exact resumption, the trained
model as an env's reward from its run directory, and datasets that do not fit the run refused naming the field."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from policyforge.algos import checkpoint
from policyforge.data.dataset import Demonstrations
from policyforge.rewards.config import RewardModelConfig
from policyforge.rewards.labels import RewardFrames, counterfactual_tasks, frame_labels
from policyforge.rewards.learned import load_learned
from policyforge.rewards.metrics import calibration_set, frame_scores, reward_accuracy
from policyforge.sims import SimConfig, make_env
from policyforge.sims.config import ImageConfig
from tests.rewards.conftest import OPTIONS, SIZE

pytestmark = pytest.mark.slow


def test_labels_ramp_to_the_first_success_and_failures_have_no_progress():
    next_success = np.array([0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1], bool)  # an episode of 6 frames, then one of 5
    success, progress = frame_labels(next_success, np.array([[0, 6], [6, 11]]))
    assert success.tolist() == [0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0]  # a frame is the state its previous action made
    assert progress[:6].tolist() == [0, 0.25, 0.5, 0.75, 1, 1]
    assert torch.isnan(progress[6:]).all(), "the second episode never succeeds"


def test_counterfactual_instructions_name_another_task_not_a_paraphrase():
    tasks = ["touch the red cube", "reach for the red cube", "touch the blue cube", "lift the red cube", "wave"]
    assert counterfactual_tasks(tasks) == [[2, 3, 4], [2, 3, 4], [0, 1, 3, 4], [0, 1, 2, 4], [0, 1, 2, 3]]
    # the hard ones: the same family on another object (a text not of arm-instructed has none)
    assert counterfactual_tasks(tasks, same_family=True) == [[2], [2], [0, 1], [], []]


def settings(tmp_path, rollouts, held_out, name: str, *overrides: str) -> list[str]:
    """The shipped recipe (configs/reward-model.yaml) on the tests' small datasets."""
    return [
        "configs/reward-model.yaml", f"out_dir={tmp_path}", f"name={name}", f"sim.task_options={json.dumps(OPTIONS)}",
        "sim.image.cameras=[task]", f"sim.image.width={SIZE}", f"sim.image.height={SIZE}", f"algo.dataset={rollouts}",
        f"algo.eval_dataset={held_out}", "algo.gradient_steps=600", "algo.steps_per_iteration=100",
        "runner.eval_every_steps=300", "runner.checkpoint_every=2", *overrides,
    ]  # fmt: skip


TRAIN = [sys.executable, "-m", "policyforge.cli", "train"]


def train(tmp_path, rollouts, held_out, name: str, *overrides: str) -> subprocess.CompletedProcess:
    command = [*TRAIN, *settings(tmp_path, rollouts, held_out, name, *overrides)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def test_a_reward_model_run_fits_progress_and_success_and_scores_an_env(tmp_path, rollouts):
    run = train(tmp_path, rollouts, rollouts, "fit")
    assert run.returncode == 0, run.stderr[-2000:]
    evaluations = [json.loads(line) for line in (tmp_path / "fit" / "metrics.jsonl").read_text().splitlines()]
    evaluations = [e for e in evaluations if "eval/success_auc" in e]
    last = evaluations[-1]
    assert last["eval/success_auc"] >= 0.9 and last["eval/progress_rank_corr"] >= 0.8, last
    assert last["eval/counterfactual_accuracy"] >= 0.6, last
    best = checkpoint.read(tmp_path / "fit" / "checkpoints" / "best.pt")["best"]
    assert best["eval/success_accuracy"] == max(e["eval/success_accuracy"] for e in evaluations)

    model = load_learned(tmp_path / "fit")
    at_best = next(e for e in evaluations if e["gradient_steps"] == best["step"])
    assert at_best["eval/success_threshold"] == pytest.approx(float(torch.sigmoid(model.success_offset)))
    data = RewardFrames(Demonstrations(rollouts), ["task"], 1, 1)
    frames, tasks, labels = calibration_set(data)
    success = frame_scores(model, data, frames, tasks)[:, 1]
    # Platt's bias: at the offset of least log-loss the mean probability is the fraction done
    assert float(success.double().mean()) == pytest.approx(float(labels.mean()), abs=0.01)
    sim = SimConfig(task="arm-instructed", num_envs=4, num_threads=1, task_options=OPTIONS,
                    image=ImageConfig(cameras=["task"], width=SIZE, height=SIZE, render="on_request"))  # fmt: skip
    sim.reward_model.path = str(tmp_path / "fit")
    env = make_env(sim, seed=0)
    env.reset(seed=0)
    info = env.step(torch.zeros(4, 5))[-1]
    scores = model.score(env.images(range(4)), env.instructions())
    torch.testing.assert_close(info["reward_terms"]["model_progress"], scores.progress, rtol=0, atol=1e-6)
    torch.testing.assert_close(info["reward_terms"]["model_reward"], scores.progress, rtol=0, atol=1e-6)


def test_a_killed_reward_model_run_resumes_to_the_same_weights(tmp_path, rollouts, held_out_rollouts):
    whole = train(tmp_path, rollouts, held_out_rollouts, "whole", "algo.gradient_steps=500")
    assert whole.returncode == 0, whole.stderr[-2000:]
    command = [*TRAIN, *settings(tmp_path, rollouts, held_out_rollouts, "killed", "algo.gradient_steps=500")]
    killed = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = tmp_path / "killed" / "checkpoints" / f"step_{200:010d}.pt"
    deadline = time.time() + 300
    while not first.exists() and killed.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert killed.poll() is None, "the run ended before it could be killed"
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    # killed between step_200.pt and latest.pt (a busy machine widens that window), resume takes step_200.pt
    assert checkpoint.newest(tmp_path / "killed" / "checkpoints")[1]["env_steps"] < 500
    resumed = subprocess.run([*TRAIN, "--resume", str(tmp_path / "killed")], capture_output=True, text=True,
                             timeout=600)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    a, b = (checkpoint.read(tmp_path / run / "checkpoints" / "latest.pt")["algo"] for run in ("whole", "killed"))
    for name in a["policy"]:
        assert torch.equal(a["policy"][name], b["policy"][name]), name


def test_a_dataset_without_the_models_cameras_or_size_is_refused_naming_the_field(tmp_path, rollouts):
    run = train(tmp_path, rollouts, rollouts, "wrist", "sim.image.cameras=[wrist]")
    said = " ".join(run.stdout.split())
    assert run.returncode == 2 and "sim.image.cameras: " in said and "has no video of ['wrist']" in said, said
    run = train(tmp_path, rollouts, rollouts, "size", "sim.image.width=48", "sim.image.height=48")
    said = " ".join(run.stdout.split())
    assert run.returncode == 2 and "sim.image.width: " in said and "holds 32 x 32 frames" in said, said


def test_the_reward_table_scores_held_out_rollouts_per_family_and_times_the_wrapper(tmp_path, rollouts, capsys):
    from policyforge.cli import main

    assert (
        train(tmp_path, rollouts, rollouts, "small", "algo.gradient_steps=20", "algo.steps_per_iteration=20").returncode
        == 0
    )
    code = main(["bench", "reward-table", "--model", str(tmp_path / "small"), "--held-out", str(rollouts),
                 "--throughput-envs", "4"])  # fmt: skip
    printed = capsys.readouterr().out
    summary = json.loads(printed.strip().splitlines()[-1])
    assert code in (None, 0) and "reward model vs ground truth" in printed
    assert summary["held_out"]["train"]["episodes"] == 24
    assert 0 <= summary["learned"]["success_accuracy"] <= 1 and -1 <= summary["learned"]["progress_rank_corr"] <= 1
    rates = summary["throughput"]
    assert set(rates) == {"none", "sync", "async", "model_ms"} and all(rate > 0 for rate in rates.values())
    assert summary["async_throughput_ratio"] == pytest.approx(rates["async"] / rates["none"])


def test_an_ensemble_of_runs_loads_into_the_env_and_the_reward_table(tmp_path, rollouts, capsys):
    from policyforge.cli import main
    from policyforge.rewards.ensemble import RewardEnsemble
    from policyforge.rewards.load import load_reward_model

    for seed in (0, 1):
        run = train(tmp_path, rollouts, rollouts, f"m{seed}", f"seed={seed}", "algo.gradient_steps=20",
                    "algo.steps_per_iteration=20")  # fmt: skip
        assert run.returncode == 0, run.stderr[-2000:]
    config = RewardModelConfig(path=str(tmp_path / "m0"), ensemble=[str(tmp_path / "m1")], uncertainty_penalty=2.0)
    ensemble = load_reward_model(config, ImageConfig(cameras=["task"], width=SIZE, height=SIZE))
    assert isinstance(ensemble, RewardEnsemble) and ensemble.uncertainty_penalty == 2.0
    members = [load_learned(tmp_path / name) for name in ("m0", "m1")]
    for mine, loaded in zip(members, ensemble.members, strict=True):
        for a, b in zip(mine.state_dict().values(), loaded.state_dict().values(), strict=True):
            assert torch.equal(a, b)
    code = main(["bench", "reward-table", "--model", str(tmp_path / "m0"), "--ensemble", str(tmp_path / "m1"),
                 "--uncertainty-penalty", "0", "--held-out", str(rollouts), "--throughput-envs", "0"])  # fmt: skip
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    data = RewardFrames(Demonstrations(rollouts), ["task"], 1, 1)
    plain_mean = RewardEnsemble(members, 0.0)
    assert code in (None, 0)
    assert summary["learned"] == pytest.approx({"episodes": 24, **reward_accuracy(plain_mean, data)})


def test_extra_rollouts_train_beside_the_dataset_in_proportion_to_their_frames(rollouts, held_out_rollouts):
    from policyforge.data.dataset import Demonstrations
    from policyforge.rewards.labels import FrameMix, RewardFrames

    parts = [RewardFrames(Demonstrations(path), ["task"], 1, 1) for path in (rollouts, held_out_rollouts)]
    mix = FrameMix(parts)
    assert len(mix) == len(parts[0]) + len(parts[1]) and torch.equal(mix.success[: len(parts[0])], parts[0].success)
    torch.manual_seed(0)
    frames, ids, progress, success = mix.sample(3000)
    assert frames.shape == (3000, 1, 1, SIZE, SIZE, 3) and ids.shape[0] == progress.shape[0] == success.shape[0]
    held_out_share = float((ids[:, None] == parts[1].task_ids[None]).all(-1).any(-1).float().mean())
    assert held_out_share > 0.15, "a held-out combination's instruction comes from the second dataset only"


def test_hard_counterfactuals_name_the_same_family_and_are_labelled_not_done(rollouts):
    from policyforge.data.dataset import Demonstrations
    from policyforge.rewards.labels import RewardFrames
    from policyforge.sims.tasks.instructions import parse

    demos = Demonstrations(rollouts)
    data = RewardFrames(demos, ["task"], 1, 1)
    assert any(data.same_kind), "the fixture's instructions include two of one family"
    batch = 500
    _, ids, progress, success = data.sample(batch, 1.0 - 1e-9, 0.0, torch.Generator().manual_seed(3), hard=1.0)
    frames = torch.randint(len(data), (batch,), generator=torch.Generator().manual_seed(3))  # sample's first draw
    text_of = {tuple(row.tolist()): text for row, text in zip(data.task_ids, demos.tasks, strict=True)}
    pairs = [
        (parse(demos.tasks[int(data.task_index[frame])]), parse(text_of[tuple(row.tolist())]))
        for frame, row in zip(frames, ids, strict=True)
        if data.same_kind[int(data.task_index[frame])]
    ]
    assert pairs and all(mine[:3] != other[:3] and mine[0] == other[0] for mine, other in pairs)
    assert (success == 0).all(), "a frame under another task's instruction is not that task done"
    assert not (progress > 0).any(), "progress is 0 or unknown under another task's instruction"


def test_rejected_rollouts_label_their_failed_episodes_no_progress(rollouts):
    demos = Demonstrations(rollouts)
    plain, rejected = RewardFrames(demos, ["task"], 1, 1), RewardFrames(demos, ["task"], 1, 1, rejected=True)
    failed = torch.zeros(len(plain), dtype=torch.bool)
    for start, end in plain.bounds:
        failed[start:end] = not plain.success[start:end].any()
    assert failed.any() and not failed.all(), "the fixture has failed and successful episodes"
    assert torch.isnan(plain.progress[failed]).all(), "a plain failure's progress is unknown"
    assert (rejected.progress[failed] == 0).all(), "a rejected failure has made no progress"
    assert torch.equal(rejected.progress[~failed], plain.progress[~failed]), "its successes keep their ramps"
    assert torch.equal(rejected.success, plain.success)
