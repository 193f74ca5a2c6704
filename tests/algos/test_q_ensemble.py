"""SAC's Q ensemble (policies/critics.py, algos/sac.py): two heads are SAC's clipped double-Q and load the former
TwinQ checkpoints; larger ensembles take REDQ's random-subset minimum for targets and the mean for the actor; the
actor waits for the critic's warm-up."""

from __future__ import annotations

import torch

from policyforge.algos.sac import SAC, SACConfig
from policyforge.policies.critics import QEnsemble
from policyforge.policies.gaussian import GaussianConfig, GaussianPolicy

OBS = {"critic": torch.randn(64, 5), "policy": torch.randn(64, 5)}


def test_a_twin_q_checkpoint_loads_as_a_two_head_ensemble():
    torch.manual_seed(0)
    saved = QEnsemble(5, 2, [16, 16])
    former = {k.replace("heads.0.", "q1.").replace("heads.1.", "q2."): v for k, v in saved.state_dict().items()}
    assert any(k.startswith("q1.") for k in former) and not any(k.startswith("heads.") for k in former)
    loaded = QEnsemble(5, 2, [16, 16])
    loaded.load_state_dict(former)
    action = torch.rand(64, 2)
    assert torch.equal(loaded(OBS, action), saved(OBS, action))


def test_layer_norm_ensembles_have_their_heads_and_norms():
    critic = QEnsemble(5, 2, [16, 16], count=10, layer_norm=True)
    assert critic(OBS, torch.rand(64, 2)).shape == (10, 64)
    assert sum(isinstance(m, torch.nn.LayerNorm) for m in critic.modules()) == 20  # 2 hidden layers × 10 heads


def sac(**config) -> SAC:
    torch.manual_seed(0)
    policy = GaussianPolicy(5, 2, GaussianConfig(hidden=[16], squash=True))
    config = SACConfig(critic_hidden=[16], buffer_size=64, batch_size=16, **config)
    return SAC(policy, {"policy": (5,), "critic": (5,)}, config, num_envs=4)


def test_targets_take_the_minimum_of_a_random_subset_and_the_actor_the_mean():
    algo = sac(critic_ensemble=10, critic_target_subset=2)
    heads = torch.randn(10, 64)
    winners = {int(torch.nonzero(heads[:, 0] == algo._subset_min(heads)[0])[0]) for _ in range(50)}
    assert len(winners) > 3  # different heads give the target on different draws
    for _ in range(20):
        target = algo._subset_min(heads)
        assert torch.all(target >= heads.min(0).values) and torch.all(target <= heads.max(0).values)
        assert ((heads == target[None]).sum(0) >= 1).all()
        assert ((heads <= target[None]).sum(0) <= 9).all()  # the minimum of 2: at most 8 heads lie below it
    assert torch.equal(algo._actor_q(heads), heads.mean(0))
    two = sac()
    assert torch.equal(two._subset_min(heads[:2]), heads[:2].min(0).values)  # clipped double-Q
    assert torch.equal(two._actor_q(heads[:2]), heads[:2].min(0).values)


def test_the_actor_waits_for_the_critic_warmup():
    algo = sac(critic_warmup_updates=5)
    for _ in range(4):
        obs = {"policy": torch.randn(16, 5), "critic": torch.randn(16, 5)}
        algo.replay.add(obs, torch.rand(16, 2) * 2 - 1, torch.randn(16), obs, torch.zeros(16, dtype=torch.bool))
    actor = [p.clone() for p in algo.policy.parameters()]
    critic = [p.clone() for p in algo.critic.parameters()]
    for _ in range(5):
        algo._update()
    assert all(torch.equal(a, b) for a, b in zip(actor, algo.policy.parameters(), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(critic, algo.critic.parameters(), strict=True))
    algo._update()
    assert not all(torch.equal(a, b) for a, b in zip(actor, algo.policy.parameters(), strict=True))
