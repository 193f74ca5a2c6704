"""best.pt: the policy of a run's best evaluation (highest success, then highest return), with its step and
figures; `policyforge eval RUN --checkpoint best` evaluates it, `latest`, N or a file the others."""

import dataclasses
import json
import re

import pytest

from policyforge.algos import checkpoint
from policyforge.algos.evaluate import evaluate
from policyforge.algos.logger import read_metrics
from policyforge.algos.runner import RunConfig, build_policy
from policyforge.cli import main
from policyforge.config import load
from policyforge.policies.export import description_path, file_sha256
from policyforge.sims import make_env


@pytest.fixture(scope="module")
def evaluated_run(tmp_path_factory, tiny_run_args):
    """A tiny run evaluated every 2 iterations: 3 evaluations, and the final one (at the last iteration's step)."""
    out = tmp_path_factory.mktemp("runs")
    assert main(["train", *tiny_run_args, "runner.eval_every_steps=256", f"out_dir={out}", "name=best"]) == 0
    return out / "best"


def test_best_pt_holds_the_best_evaluation(evaluated_run):
    evaluations = [r for r in read_metrics(evaluated_run) if "eval/return" in r]
    assert len(evaluations) == 4 and len({r["eval/return"] for r in evaluations}) >= 3, "evaluations that differ"
    best = max(evaluations, key=lambda r: (r["eval/success"], r["eval/return"]))  # the first of equals
    kept = checkpoint.read(evaluated_run / "checkpoints" / checkpoint.BEST)
    assert kept["best"] == {"step": best["env_steps"], "step_unit": "env_steps"} | {
        key: best[key] for key in ("eval/success", "eval/return", "eval/length")
    }
    assert best["env_steps"] != evaluations[-1]["env_steps"], "this seed's best is not its last: a real choice"
    latest = checkpoint.read(evaluated_run / "checkpoints" / "latest.pt")["algo"]["policy"]
    assert any(not (kept["algo"]["policy"][k] == latest[k]).all() for k in latest)


def test_eval_checkpoint_best_evaluates_the_best_policy(evaluated_run, capsys):
    best = checkpoint.read(evaluated_run / "checkpoints" / checkpoint.BEST)["best"]
    assert main(["eval", str(evaluated_run), "--checkpoint", "best"]) == 0
    out = capsys.readouterr().out
    assert f"eval/return: {best['eval/return']:.4g}" in out  # the same seeded evaluation, so the same figure
    assert f"best.pt: the policy evaluated @ {best['step']:,} env steps: success 0%, return" in " ".join(out.split())
    assert re.search(r"eval/success: \d+%", out), "success in percent"
    assert main(["eval", str(evaluated_run), "--checkpoint", "latest"]) == 0
    final = [r for r in read_metrics(evaluated_run) if "eval/return" in r][-1]
    assert f"eval/return: {final['eval/return']:.4g}" in capsys.readouterr().out


def test_eval_checkpoint_names_what_a_run_does_not_have(evaluated_run, tmp_path, capsys):
    assert main(["eval", str(evaluated_run), "--checkpoint", "99"]) == 2
    assert (
        "no checkpoint at 99 steps (step_0000000099.pt); it keeps the checkpoints at 384, 768, 1024 steps"
        in " ".join(capsys.readouterr().out.split())
    )
    (evaluated_run / "checkpoints" / checkpoint.BEST).rename(tmp_path / "best.pt")
    try:
        assert main(["eval", str(evaluated_run), "--checkpoint", "best"]) == 2
        assert "has no checkpoints/best.pt" in " ".join(capsys.readouterr().out.split())
        assert main(["eval", str(evaluated_run), "--checkpoint", str(tmp_path / "best.pt"), "--envs", "2"]) == 0
    finally:
        (tmp_path / "best.pt").rename(evaluated_run / "checkpoints" / checkpoint.BEST)


@pytest.mark.parametrize(("task", "recipe"), [("quadruped-walk", "quadruped-walk-ppo"), ("pendulum-swingup", None)])
def test_evaluations_report_success_only_for_tasks_that_define_it(task, recipe):
    config = load(RunConfig, f"configs/{recipe or task + '-ppo'}.yaml", ["runner.eval_envs=2"])
    env = make_env(dataclasses.replace(config.sim, num_envs=2), seed=0)
    metrics = evaluate(build_policy(config, env).eval(), env, seed=0)
    env.close()
    assert ("eval/success" in metrics) == (task != "quadruped-walk")
    assert metrics["eval/return_std"] >= 0


def test_export_checkpoint_best_exports_the_best_policy(evaluated_run, tmp_path):
    out = tmp_path / "best.onnx"
    assert main(["export", str(evaluated_run), "--format", "onnx", "--out", str(out), "--checkpoint", "best"]) == 0
    source = json.loads(description_path(out).read_text())["source"]
    assert source["checkpoint"] == f"checkpoints/{checkpoint.BEST}"
    assert source["sha256"] == file_sha256(evaluated_run / "checkpoints" / checkpoint.BEST)
