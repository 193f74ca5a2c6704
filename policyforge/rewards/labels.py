"""Training labels of a reward model, from a LeRobot dataset of rollouts (`policyforge collect` writes them).

Each frame is the state before its action; its success is the dataset's `next.success` of the frame before (the
state that action made; false at an episode's first frame). Its progress:
  - in an episode that succeeds, a ramp in time: 0 at the first frame, 1 from the first successful frame on
    (the "progress ramps" of successful demonstrations, as GVL and ReWiND read expert videos);
  - in an episode that never succeeds, unknown (NaN, left out of the progress loss): only its success (0) is taught;
  - in a rejected dataset (`rejected=True`: rollouts of a policy that fooled the model, e.g. with the arm away from
    the cubes, judged from their videos), 0 at every frame of an episode that never succeeds (its successful
    episodes keep their ramps: such a policy's rollouts mix its hack with the odd success).
Negatives made from the same frames:
  - counterfactual instruction (RoboReward): a frame paired with another instruction of the dataset that names
    another task (another family, object or target). Success 0; progress 0 where the frame is at least half-way
    through its own task (the scene shows another task being done), unknown before that. A share of them name the
    same kind of task on another object or target ("hard" ones: the words alone do not tell them apart, so the
    model must look at which cube the arm is at, not only at how far the arm has moved);
  - temporal reversal (ReWiND's rewinding, for windows of T ≥ 2 frames): the window played backwards, labelled as
    the frame it now ends on, so motion towards the goal is not read as progress by itself.

    samples = RewardFrames(demos, cameras, window, frame_stride)
    frames, instruction_ids, progress, success = samples.sample(batch, counterfactual=0.3, reversal=0.2, hard=0.5)
        frames uint8 [B, T, V, H, W, 3], instruction_ids int32 [B, L], progress [B] (NaN: unknown), success [B]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from policyforge.data.dataset import DatasetError, Demonstrations

SUCCESS_KEY = "next.success"


class RewardFrames:
    """A dataset's frames with their labels, and random training samples of them (module docstring)."""

    def __init__(
        self,
        demos: Demonstrations,
        cameras: list[str],
        window: int,
        frame_stride: int,
        episodes: Sequence[int] | None = None,
        rejected: bool = False,
    ):
        """The frames of `demos`' `episodes` (default all), `cameras`' views of them; `rejected`: progress 0 in
        the episodes that never succeed."""
        from policyforge.sims.instruction_obs import tokenizer

        missing = [camera for camera in cameras if camera not in demos.cameras]
        if missing:
            raise DatasetError(
                f"{demos.root} has no video of cameras {missing} (it has {demos.cameras}); the reward model reads "
                f"sim.image.cameras={cameras}: record them (`policyforge collect ... --cameras {','.join(cameras)}`)"
            )
        if SUCCESS_KEY not in demos.info["features"]:
            raise DatasetError(f"{demos.root} has no {SUCCESS_KEY}: a reward model learns success from it")
        self.window, self.frame_stride = window, frame_stride
        episodes = list(range(demos.num_episodes)) if episodes is None else list(episodes)
        self.images = torch.as_tensor(np.stack([demos.images(camera, episodes) for camera in cameras], axis=1))
        """Every frame's views [N, V, H, W, 3] uint8."""
        lengths = np.diff(demos.episode_bounds[episodes], axis=1)[:, 0]
        starts = np.concatenate([[0], np.cumsum(lengths)])
        self.bounds = np.stack([starts[:-1], starts[1:]], axis=1)
        """[E, 2] each selected episode's [from, to) frames in this object's arrays."""
        self.success, self.progress = frame_labels(demos.column(SUCCESS_KEY, episodes).astype(bool), self.bounds)
        if rejected:
            self.progress.nan_to_num_(0.0)  # NaN: exactly the frames of episodes that never succeed
        if not demos.tasks:
            raise DatasetError(f"{demos.root} has no task instructions (meta/tasks.parquet): a reward model reads them")
        self.task_index = torch.as_tensor(demos.column("task_index", episodes).astype(np.int64))
        self.task_ids = tokenizer()(demos.tasks)
        """Token ids int32 [K, L] of the dataset's K instructions."""
        self.others = counterfactual_tasks(demos.tasks)
        """For each task index, the indices of the dataset's tasks that name another task."""
        self.same_kind = counterfactual_tasks(demos.tasks, same_family=True)
        """For each task index, those of `others` that name the same family (another object or target)."""
        self.first = torch.as_tensor(np.repeat(self.bounds[:, 0], lengths))

    def __len__(self) -> int:
        return len(self.images)

    def windows(self, frames: torch.Tensor, reverse: torch.Tensor | None = None) -> torch.Tensor:
        """Frame indices [B, T] of the windows ending at `frames` [B] (clamped to the episode's first frame);
        `reverse` [B] bool: those windows played backwards."""
        offsets = torch.arange(self.window - 1, -1, -1) * self.frame_stride
        index = torch.maximum(frames[:, None] - offsets, self.first[frames][:, None])
        if reverse is not None:
            index = torch.where(reverse[:, None], index.flip(1), index)
        return index

    def sample(
        self,
        batch: int,
        counterfactual: float = 0.0,
        reversal: float = 0.0,
        generator: torch.Generator | None = None,
        hard: float = 0.0,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """`batch` random samples (module docstring); `counterfactual` and `reversal` are the fractions of them
        made into those negatives, `hard` the fraction of the counterfactual ones naming the same family."""
        frames = torch.randint(len(self), (batch,), generator=generator)
        reverse = (torch.rand(batch, generator=generator) < reversal) & (self.window > 1)
        index = self.windows(frames, reverse)
        shown = index[:, -1]  # the frame a window ends on, whose labels it takes
        progress, success = self.progress[shown].clone(), self.success[shown].clone()
        tasks = self.task_index[frames]
        swap = torch.rand(batch, generator=generator) < counterfactual
        same_kind = torch.rand(batch, generator=generator) < hard
        for row in swap.nonzero()[:, 0].tolist():
            task = int(tasks[row])
            others = self.same_kind[task] if same_kind[row] and self.same_kind[task] else self.others[task]
            if others:
                pick = int(torch.randint(len(others), (1,), generator=generator))
                tasks[row] = others[pick]
                success[row] = 0.0
                progress[row] = 0.0 if progress[row] >= 0.5 else float("nan")
        return self.images[index], self.task_ids[tasks], progress, success


def frame_labels(next_success: np.ndarray, bounds: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """(success, progress) float32 [N] of every frame from the dataset's `next.success` [N] and episode bounds
    [E, 2] (module docstring; progress NaN in episodes that never succeed)."""
    success = np.zeros(len(next_success), np.float32)
    progress = np.full(len(next_success), np.nan, np.float32)
    for start, end in bounds:
        success[start + 1 : end] = next_success[start : end - 1]
        reached = np.flatnonzero(success[start:end])
        if len(reached):
            steps = np.arange(end - start, dtype=np.float32)
            progress[start:end] = np.minimum(steps / max(int(reached[0]), 1), 1.0)
    return torch.as_tensor(success), torch.as_tensor(progress)


def counterfactual_tasks(tasks: list[str], same_family: bool = False) -> list[list[int]]:
    """For each task text, the indices of the other texts that name another task: for arm-instructed's
    instructions another (family, object, target) — not a paraphrase of the same — for any other text, any other.
    `same_family`: only arm-instructed's instructions of the same family (none for other texts)."""
    from policyforge.sims.tasks.instructions import parse

    def meaning(text: str) -> object:
        try:
            return parse(text)[:3]
        except ValueError:
            return text

    meanings = [meaning(text) for text in tasks]

    def kind(meaning: object) -> object:
        return meaning[0] if isinstance(meaning, tuple) else None  # None: a text that is not arm-instructed's

    def counts(mine: object, other: object) -> bool:
        return other != mine and (not same_family or (kind(mine) is not None and kind(other) == kind(mine)))

    return [[j for j, other in enumerate(meanings) if counts(mine, other)] for mine in meanings]


class FrameMix:
    """Training samples drawn from several datasets' `RewardFrames`, each in proportion to its frames."""

    def __init__(self, parts: list[RewardFrames]):
        self.parts = parts
        sizes = torch.tensor([len(part) for part in parts], dtype=torch.float64)
        self.weights = sizes / sizes.sum()
        self.success = torch.cat([part.success for part in parts])
        """Every frame's success label [N] (of all the datasets)."""

    def __len__(self) -> int:
        return len(self.success)

    def sample(
        self,
        batch: int,
        counterfactual: float = 0.0,
        reversal: float = 0.0,
        generator: torch.Generator | None = None,
        hard: float = 0.0,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """`RewardFrames.sample`'s four tensors, `batch` samples from the datasets together."""
        picks = torch.multinomial(self.weights, batch, replacement=True, generator=generator)
        counts = torch.bincount(picks, minlength=len(self.parts)).tolist()
        drawn = [
            part.sample(n, counterfactual, reversal, generator, hard)
            for part, n in zip(self.parts, counts, strict=True)
            if n
        ]
        return tuple(torch.cat(tensors) for tensors in zip(*drawn, strict=True))  # type: ignore[return-value]
