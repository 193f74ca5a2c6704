"""What training shows: a persistent line per evaluation, train/eval figures labelled, success only for tasks that
define it, the run's own step unit, and a total and ETA that count everything left and never go wrong."""

import io
import itertools
import re

import pytest
from rich.console import Console

from policyforge.algos.progress import ProgressDisplay, ProgressPlan, duration, eval_figures
from policyforge.algos.runner import Runner
from policyforge.config import load

EVAL = {"eval/return": 123.44, "eval/return_std": 5.61, "eval/success": 0.875, "eval/length": 200.0}


def schedule(start: int, total: int, per_iteration: int, eval_every: int) -> tuple[int, int]:
    """(final step count, evaluations) of the runner's loop, stepped through as `Runner._train_until` does."""
    steps, evaluations = start, 1  # the final evaluation
    next_eval = (steps // eval_every + 1) * eval_every if eval_every else 0
    while steps < total:
        steps += per_iteration
        if next_eval and total > steps >= next_eval:
            evaluations += 1
            next_eval = (steps // eval_every + 1) * eval_every
    return steps, evaluations


@pytest.mark.parametrize(
    ("start", "total", "per_iteration", "eval_every"),
    [
        (0, 100_000, 2048, 10_000),  # the DPPO journey: 100,352 steps, shown as 100,352/100,000 before
        (0, 153_600, 4096, 25_600),
        (0, 3000, 1000, 3000),
        (4096, 100_000, 4096, 2048),  # an iteration longer than the evaluation interval
        (0, 100_000, 100, 0),  # behaviour cloning's gradient steps, evaluated only at the end
        (1536, 1500, 128, 256),  # resumed past its (lowered) length: only the final evaluation is left
        *[(start, 5000, per, every) for start, per, every in itertools.product((0, 640), (128, 384), (0, 256, 1000))],
    ],
)
def test_the_plan_ends_where_the_runner_ends_and_counts_its_evaluations(start, total, per_iteration, eval_every):
    plan = ProgressPlan(start, total, per_iteration, eval_every)
    end, evaluations = schedule(start, total, per_iteration, eval_every)
    assert plan.end == end >= max(total, start)
    assert plan.evaluations_left(start) == evaluations
    steps = start
    while steps < plan.end:  # at every iteration: what is left is what the loop will still do
        steps += per_iteration
        assert plan.evaluations_left(steps) == schedule(steps, total, per_iteration, eval_every)[1]
        assert steps <= plan.end


def test_the_eta_counts_evaluations_and_is_never_negative():
    plan = ProgressPlan(0, 100_000, 2048, 10_000)
    assert plan.eta(0, 0.0, 5.0) is None  # nothing to extrapolate from yet
    halfway = plan.eta(51_200, 10.0, None)  # 51,200 steps in 10 s: 49,152 left take 9.6 s
    assert halfway == pytest.approx(9.6)
    assert plan.eta(51_200, 10.0, 2.0) == pytest.approx(9.6 + 2.0 * 5)  # 60k..90k in the loop, and the final one
    assert plan.eta(plan.end, 20.0, 2.0) == pytest.approx(2.0)  # only the final evaluation is left
    for steps, seconds, eval_s in itertools.product((2048, 98_304, 100_352, 104_448), (0.5, 1e4), (None, 0.0, 9.0)):
        assert plan.eta(steps, seconds, eval_s) >= 0


def display(terminal: bool, step_unit: str = "env_steps", plan: ProgressPlan | None = None):
    out = io.StringIO()
    console = Console(file=out, force_terminal=terminal, width=200, color_system=None)
    return ProgressDisplay(console, plan or ProgressPlan(0, 153_600, 2048, 25_600), step_unit, every_s=0.0), out


@pytest.mark.parametrize("terminal", [False, True])
def test_every_evaluation_prints_a_persistent_labelled_line(terminal):
    shown, out = display(terminal)
    shown.update(2048, 1000.0, {"train/return": 50.5, "train/success": 0.5})
    shown.evaluation(153_600, EVAL, 3.2, 16, best=True)
    shown.update(153_600, 1000.0, {})
    shown.close()
    text = out.getvalue()
    assert "eval @ 153,600 env steps: success 88% (16 episodes), return 123.4 ± 5.6, length 200 · 3.2s" in text
    assert "best so far → best.pt" in text
    assert "train: success 50%, return 50.5" in text  # the sampler's figures are labelled train, and kept
    assert "eval @ 153,600: success 88%, return 123.4" in text.split("3.2s")[-1]  # and the latest eval beside them


def test_tasks_without_success_show_none_and_bc_counts_gradient_steps():
    shown, out = display(False, "gradient_steps", ProgressPlan(0, 10_000, 100, 0))
    shown.update(100, 50.0, {"train/return": 3.0})
    shown.evaluation(10_000, {"eval/return": 812.0, "eval/return_std": 40.0, "eval/length": 1000.0}, 30.0, 4, False)
    text = out.getvalue()
    assert "gradient steps 100/10,000 (1%)  50 gradient steps/s" in text
    assert "eval @ 10,000 gradient steps: return 812.0 ± 40.0 (4 episodes), length 1000 · 30s" in text
    assert "success" not in text and "best.pt" not in text
    assert eval_figures({"eval/return": 1.0}) == "return 1.0"


def test_the_shown_count_never_passes_the_total_and_the_eta_never_goes_negative():
    shown, out = display(False, plan=ProgressPlan(0, 100_000, 2048, 10_000))
    for steps in range(2048, 100_352 + 1, 2048):
        shown.update(steps, 1e6, {})
    counts = re.findall(r"env steps ([\d,]+)/([\d,]+) \((\d+)%\)", out.getvalue())
    assert counts[-1] == ("100,352", "100,352", "100")
    assert all(int(done.replace(",", "")) <= int(total.replace(",", "")) for done, total, _ in counts)
    etas = re.findall(r"ETA (≥ )?(\S+)", out.getvalue())
    assert etas and not any(eta.startswith("-") and eta != "-" for _, eta in etas)
    assert duration(-3) == "0.0s" and duration(125) == "2m05s" and duration(7620) == "2h07m"


def test_a_run_prints_its_evaluations(tmp_path, tiny_run_args):
    """A real (tiny) run's output: a line per evaluation, in the run's unit, with success in percent."""
    from policyforge.algos.runner import RunConfig

    args = [*tiny_run_args[1:], "runner.eval_every_steps=512", f"out_dir={tmp_path}", "name=shown"]
    out = io.StringIO()
    runner = Runner.start(load(RunConfig, tiny_run_args[0], args), Console(file=out, width=200))
    runner.train()
    runner.close()
    lines = [line for line in out.getvalue().splitlines() if line.startswith("eval @")]
    steps = ["eval @ 512 env steps", "eval @ 1,024 env steps"]  # the last, the final one: one evaluation per step
    assert [line.split(":")[0] for line in lines] == steps
    assert all(
        re.search(r": success \d+% \(2 episodes\), return -?[\d.]+ ± [\d.]+, length \d+", line) for line in lines
    )
