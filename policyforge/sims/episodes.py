"""Episode bookkeeping of a step, as pure batched functions over an array namespace `xp` (numpy or jax.numpy).

Every backend ends its `step` with the same call, so time limits, episode statistics and the start of new
episodes mean the same thing everywhere (the contract is `vec_env.StepInfo`):

    outcome = end_step(counters, reward, terminated, success, xp, episode_steps=T)
    counters = outcome.counters          # finished envs' counters are zero: their new episodes start here
    info["episode"] = outcome.episode    # statistics of the episodes that ended at this step
    # the backend then resets the envs where `outcome.done` (auto-reset): `info["final_obs"]` keeps the
    # observation computed before the reset, the returned `obs` holds the new episodes' first observations
    # in those rows (`where_rows` merges them where a backend resets all rows at once, as MJX does).

Counters, rewards and flags are [N] arrays; inside `jax.jit` everything here traces (no Python branch on
array values).
"""

from __future__ import annotations

from typing import Any, NamedTuple

Array = Any  # a numpy or jax array
Xp = Any  # an array namespace: numpy or jax.numpy


class EpisodeCounters(NamedTuple):
    """Running statistics of each env's current episode (a pytree of three [N] arrays)."""

    returns: Array
    """float [N] sum of rewards so far (float64 on numpy, JAX's default float on MJX)."""
    lengths: Array
    """int [N] control steps so far; also the time-limit clock (`length >= episode_steps` truncates)."""
    success_once: Array
    """bool [N] whether the task's success flag was true at some step of the episode."""

    @classmethod
    def zeros(cls, n: int, xp: Xp, float_dtype: Any = None, int_dtype: Any = None) -> EpisodeCounters:
        """Counters of n envs at the start of their episodes (dtypes default to xp's float and int)."""
        float_dtype = float if float_dtype is None else float_dtype
        int_dtype = int if int_dtype is None else int_dtype
        return cls(xp.zeros(n, dtype=float_dtype), xp.zeros(n, dtype=int_dtype), xp.zeros(n, dtype=bool))

    def restart(self, mask: Array, xp: Xp) -> EpisodeCounters:
        """These counters with the envs where `mask` (bool [N]) at the start of new episodes (zero)."""
        return EpisodeCounters(*(xp.where(mask, xp.zeros_like(counter), counter) for counter in self))


class StepOutcome(NamedTuple):
    """What `end_step` decides about one step of N envs."""

    truncated: Array
    """bool [N] the time limit ended the episode (never where `terminated`)."""
    done: Array
    """bool [N] `terminated | truncated`: the episode ended; the backend resets these envs now."""
    episode: dict[str, Array]
    """Statistics of the episodes that ended, [N] each, zero/false where not `done`, under the keys of
    `vec_env.EpisodeStats` (`done`; `return` float32; `length` int, xp's int dtype; `success` and
    `success_once` bool)."""
    counters: EpisodeCounters
    """Counters after the step: accumulated, then zero for `done` envs (their new episodes)."""


def end_step(
    counters: EpisodeCounters,
    reward: Array,
    terminated: Array,
    success: Array | None,
    xp: Xp,
    *,
    episode_steps: int | None = None,
    truncated: Array | None = None,
) -> StepOutcome:
    """Account one step: add `reward` [N] and the `success` flags (bool [N], or None for tasks without one) to
    the episode counters, decide time-outs and report the episodes that ended.

    The time limit is either `episode_steps` (truncate once an episode has that many steps) or, for a
    simulator that keeps its own clock (gymnasium's TimeLimit), its `truncated` flags [N]; either way a
    terminal state is a termination, not a truncation.
    """
    if (episode_steps is None) == (truncated is None):
        raise ValueError("end_step needs exactly one of episode_steps (the limit) or truncated (the flags)")
    terminated = xp.asarray(terminated, dtype=bool)
    returns = counters.returns + reward
    lengths = counters.lengths + 1
    succeeded = xp.zeros_like(terminated) if success is None else xp.asarray(success, dtype=bool)
    success_once = counters.success_once | succeeded
    limit = lengths >= episode_steps if truncated is None else xp.asarray(truncated, dtype=bool)
    truncated = limit & ~terminated
    done = terminated | truncated
    episode = {
        "done": done,
        "return": xp.where(done, returns, 0.0).astype(xp.float32),
        "length": xp.where(done, lengths, 0),
        "success": done & succeeded,
        "success_once": done & success_once,
    }
    after = EpisodeCounters(xp.where(done, 0.0, returns), xp.where(done, 0, lengths), success_once & ~done)
    return StepOutcome(truncated, done, episode, after)


def where_rows(mask: Array, new: Array, old: Array, xp: Xp) -> Array:
    """Rows of `new` where `mask` [N], else rows of `old` (arrays [N, ...] of one shape; `old`'s dtype): how a
    backend that computes fresh episodes for every row at once merges them into the finished rows only."""
    return xp.where(mask.reshape(mask.shape + (1,) * (old.ndim - 1)), new.astype(old.dtype), old)
