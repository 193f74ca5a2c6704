"""n-step transitions (algos/nstep.py) against a plain per-env reference: every one-step transition becomes exactly
one n-step transition, its return the γ-discounted sum of up to n rewards, cut where its episode ended, bootstrapped
from the observation n steps on (or the final one) with discount γ^k."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from policyforge.algos.nstep import NStepReturns


def reference(rewards, ends, terminals, n, gamma):
    """Per env, per start step: (start, return, next step index, terminated, discount)."""
    out = []
    steps, envs = rewards.shape
    for env in range(envs):
        for start in range(steps):
            total, k = 0.0, 0
            for t in range(start, min(start + n, steps)):
                total += gamma**k * float(rewards[t, env])
                k += 1
                if ends[t, env]:
                    break
            last = start + k - 1
            if k == n or ends[last, env]:  # complete by the end of the sequence
                out.append((env, start, round(total, 5), last, bool(terminals[last, env] and ends[last, env]),
                            round(gamma**k, 5)))  # fmt: skip
    return sorted(out)


def run(rewards, ends, terminals, n, gamma):
    steps, envs = rewards.shape
    pending, got = NStepReturns(n, gamma, envs), []
    for t in range(steps):
        ids = torch.arange(envs)
        obs = {"s": torch.stack([ids, torch.full((envs,), t)], 1).float()}  # (env, step) as the observation
        final = {"s": torch.stack([ids, torch.full((envs,), t)], 1).float()}  # the step whose end it is
        rows = pending.push(obs, torch.zeros(envs, 1), rewards[t], final, terminals[t] & ends[t], ends[t])
        if rows is None:
            continue
        for i in range(len(rows["reward"])):
            env, start = rows["obs"]["s"][i].long().tolist()
            last = int(rows["next_obs"]["s"][i, 1])
            got.append((env, start, round(float(rows["reward"][i]), 5), last, bool(rows["terminated"][i]),
                        round(float(rows["discount"][i]), 5)))  # fmt: skip
    return sorted(got)


def test_an_episode_end_cuts_the_return_and_a_termination_its_bootstrap():
    rewards = torch.tensor([[1.0, 1.0], [2.0, 2.0], [4.0, 4.0], [8.0, 8.0]])
    ends = torch.tensor([[False, False], [True, False], [False, False], [False, False]])
    terminals = torch.tensor([[False, False], [True, False], [False, False], [False, False]])
    got = run(rewards, ends, terminals, n=3, gamma=0.5)
    assert (0, 0, 2.0, 1, True, 0.25) in got  # 1 + 0.5·2, its episode terminated at step 1
    assert (0, 1, 2.0, 1, True, 0.5) in got
    assert (1, 0, 1 + 1 + 1.0, 2, False, 0.125) in got  # 1 + 0.5·2 + 0.25·4: three steps, bootstrap γ³
    assert (0, 2, 4 + 4.0, 3, False, 0.25) not in got  # still pending after the last step
    assert got == reference(rewards, ends, terminals, 3, 0.5)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 5),
    steps=st.integers(1, 12),
    envs=st.integers(1, 3),
    seed=st.integers(0, 10_000),
)
def test_matches_the_per_env_reference(n, steps, envs, seed):
    generator = torch.Generator().manual_seed(seed)
    rewards = torch.randint(0, 3, (steps, envs), generator=generator).float()
    ends = torch.rand(steps, envs, generator=generator) < 0.3
    terminals = torch.rand(steps, envs, generator=generator) < 0.5
    assert run(rewards, ends, terminals, n, 0.9) == reference(rewards, ends, terminals, n, 0.9)
