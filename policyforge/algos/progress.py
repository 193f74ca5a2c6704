"""What training shows while it runs: a progress bar (plain lines when not on a terminal) whose live figures are
labelled `train` (the sampler's own, noisy, episodes) and `eval` (the latest deterministic evaluation), a
persistent line per evaluation, and an ETA that counts everything left, evaluations included.

`ProgressPlan` holds the arithmetic (where the run ends, evaluations left, ETA) apart from the terminal, so it can be
checked on its own: the total shown is the step count the run will reach (a whole number of iterations, so the
count never passes it) and the ETA is never negative.
"""

from __future__ import annotations

import dataclasses
import math
import time

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn


def unit_name(step_unit: str) -> str:
    """`env_steps` → "env steps", `gradient_steps` → "gradient steps" (an `Algorithm.step_unit` in words)."""
    return step_unit.replace("_", " ")


def percent(fraction: float) -> str:
    """A success rate as users read it everywhere: 0.875 → "88%"."""
    return f"{fraction:.0%}"


def metric_text(key: str, value: float) -> str:
    """One metric for a person: success rates (`*/success`, `eval/success/<group>`) in percent, other figures to 4
    significant digits."""
    return percent(value) if key.endswith("/success") or "/success/" in key else f"{value:.4g}"


def duration(seconds: float) -> str:
    """A span of time in the units that fit: "0.4s", "45s", "3m05s", "2h07m"."""
    if seconds < 9.95:
        return f"{max(seconds, 0.0):.1f}s"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


@dataclasses.dataclass(frozen=True)
class ProgressPlan:
    """What is left of a training session: the runner trains whole iterations of `per_iteration` steps from
    `start` while below `total`, evaluates whenever its count reaches a multiple of `eval_every` (0: never in the
    loop) before the last iteration, and evaluates at the end (the final evaluation)."""

    start: int
    """Step count the session started from (0, or where a resumed run stood)."""
    total: int
    """The run's length (`Algorithm.total_steps`)."""
    per_iteration: int
    """Steps one iteration adds (`Algorithm.steps_per_iteration`)."""
    eval_every: int
    """`runner.eval_every_steps` (0: only the final evaluation)."""

    @property
    def end(self) -> int:
        """The step count the run will stop at: `total` rounded up to whole iterations from `start`."""
        if self.start >= self.total:
            return self.start
        return self.start + math.ceil((self.total - self.start) / self.per_iteration) * self.per_iteration

    def evaluations_left(self, steps: int) -> int:
        """Evaluations still to run after `steps`: those the loop will reach before its last iteration (whose
        evaluation is the final one), and the final one."""
        if not self.eval_every or steps >= self.end:
            return 1
        if self.per_iteration >= self.eval_every:  # every iteration reaches a new multiple
            return (self.end - steps) // self.per_iteration
        return (self.end - self.per_iteration) // self.eval_every - steps // self.eval_every + 1

    def eta(self, steps: int, training_s: float, eval_s: float | None) -> float | None:
        """Seconds left at `steps`, `training_s` after the session started (all its time but evaluations'),
        each evaluation taking `eval_s` (None: not timed yet, left out). None before the first iteration."""
        done = steps - self.start
        if done <= 0 or training_s <= 0:
            return None
        left = max(self.end - steps, 0) * training_s / done
        return max(0.0, left + self.evaluations_left(steps) * (eval_s or 0.0))


class ProgressDisplay:
    """The live display of a training session: a bar (or a plain line every `every_s` seconds when not on a
    terminal) with the step count in the run's unit, steps/s, the `train` and latest `eval` figures and the ETA,
    and one persistent line per evaluation."""

    def __init__(self, console: Console, plan: ProgressPlan, step_unit: str, every_s: float = 10.0):
        self.console, self.plan, self.unit, self.every_s = console, plan, unit_name(step_unit), every_s
        self._started = time.monotonic()
        self._eval_seconds: list[float] = []
        """Durations of this session's evaluations."""
        self._earlier_eval_seconds: list[float] = []
        """Durations of the run's evaluations before this session (a resumed run), from metrics.jsonl."""
        self._train: dict[str, float] = {}
        self._eval = ""
        self._last_print = -math.inf
        self._progress = None
        if console.is_terminal:
            self._progress = Progress(
                TextColumn("[bold]train"),
                BarColumn(bar_width=24),
                TextColumn(f"{{task.completed:,}}/{{task.total:,}} {self.unit}"),
                TextColumn("{task.fields[rate]}"),
                TextColumn("{task.fields[figures]}"),
                TimeElapsedColumn(),
                TextColumn("ETA {task.fields[eta]}"),
                console=console,
            )
            self._task = self._progress.add_task(
                "train", total=plan.end, completed=plan.start, rate="", figures="", eta="-"
            )
            self._progress.start()

    def seed_eval_seconds(self, seconds: list[float]) -> None:
        """Durations of the run's earlier evaluations (a resumed run), for the ETA until this session times one."""
        self._earlier_eval_seconds = list(seconds)

    def update(self, steps: int, per_second: float, train: dict[str, float]) -> None:
        """After an iteration: the step count, its steps/s and its `train/*` metrics (figures not in it keep
        their last value)."""
        self._train.update({key: value for key, value in train.items() if key in ("train/return", "train/success")})
        rate = f"{per_second:,.0f} {self.unit}/s"
        fields = {"rate": rate, "figures": self._figures(), "eta": self.eta_text(steps)}
        if self._progress is not None:
            self._progress.update(self._task, completed=steps, total=max(self.plan.end, steps), **fields)
        elif time.monotonic() - self._last_print >= self.every_s or steps >= self.plan.end:
            self._last_print = time.monotonic()
            total = max(self.plan.end, steps)
            line = [f"{self.unit} {steps:,}/{total:,} ({steps / max(total, 1):.0%})", rate, fields["figures"]]
            self._say("  ".join([part for part in line if part] + [f"ETA {fields['eta']}"]))

    def evaluation(self, steps: int, metrics: dict[str, float], seconds: float, episodes: int, best: bool) -> None:
        """Print the persistent line of an evaluation at `steps` (`eval/*` metrics, `episodes` episodes, taking
        `seconds`); `best`: it is the best so far (checkpointed as best.pt)."""
        self._eval_seconds.append(seconds)
        self._eval = f"eval @ {steps:,}: {eval_figures(metrics, short=True)}"
        line = f"eval @ {steps:,} {self.unit}: {eval_figures(metrics, episodes)} · {duration(seconds)}"
        self._say(line + (" · best so far → best.pt" if best else ""))

    def eta_text(self, steps: int) -> str:
        """The ETA at `steps`; "≥ …" while no evaluation has been timed and some are left (a lower bound)."""
        timed = self._eval_seconds or self._earlier_eval_seconds[-5:]
        eval_s = sum(timed) / len(timed) if timed else None
        eta = self.plan.eta(steps, time.monotonic() - self._started - sum(self._eval_seconds), eval_s)
        if eta is None:
            return "-"
        return duration(eta) if eval_s is not None else f"≥ {duration(eta)}"

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()

    def _figures(self) -> str:
        train = []
        if "train/success" in self._train:
            train.append(f"success {percent(self._train['train/success'])}")
        if "train/return" in self._train:
            train.append(f"return {self._train['train/return']:.1f}")
        parts = [f"train: {', '.join(train)}"] if train else []
        return "  │  ".join([*parts, self._eval] if self._eval else parts)

    def _say(self, text: str) -> None:
        console = self._progress.console if self._progress is not None else self.console
        console.print(text, markup=False, highlight=False, soft_wrap=True)


def eval_figures(metrics: dict[str, float], episodes: int | None = None, short: bool = False) -> str:
    """An evaluation's figures in words: success in percent (only for tasks that define success), the mean return
    with its spread over episodes, the mean episode length."""
    parts = []
    count = f" ({episodes} episodes)" if episodes else ""
    if "eval/success" in metrics:
        parts.append(f"success {percent(metrics['eval/success'])}{count}")
        count = ""
    if "eval/return" not in metrics:  # an offline evaluation (a reward model's): its own figures
        parts += [f"{key[5:]} {value:.3g}" for key, value in metrics.items() if key.startswith("eval/")]
        return ", ".join(parts)
    spread = metrics.get("eval/return_std")
    ret = f"return {metrics['eval/return']:.1f}" + (f" ± {spread:.1f}" if spread is not None and not short else "")
    parts.append(ret + count)
    if "eval/length" in metrics and not short:
        parts.append(f"length {metrics['eval/length']:.0f}")
    return ", ".join(parts)


def best_line(best: dict) -> str:
    """What best.pt holds, from its recorded figures (`checkpoint.save_best`)."""
    unit = unit_name(best.get("step_unit", "env_steps"))
    return f"best.pt: the policy evaluated @ {best['step']:,} {unit}: {eval_figures(best, short=True)}"
