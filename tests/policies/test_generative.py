"""Diffusion and flow samplers against references: diffusers' DDIM step, the Flow-SDE marginals of a known
flow, the DPPO chain's std floor and noise clip, ChunkedActor's per-env history and chunk execution, and the
residual policy's frozen base and per-step corrections."""

import json

import numpy as np
import pytest
import torch
from diffusers import DDIMScheduler
from torch import nn

from policyforge.config import ConfigError
from policyforge.policies.chunked import MIN_STD, ChunkConfig
from policyforge.policies.denoisers import DenoiserConfig
from policyforge.policies.diffusion import DiffusionConfig, DiffusionPolicy
from policyforge.policies.export import export
from policyforge.policies.export_description import description_path
from policyforge.policies.flow import FlowConfig, FlowPolicy
from policyforge.policies.residual import ResidualConfig, ResidualPolicy
from policyforge.policies.rollout import ChunkedActor
from policyforge.real_robot.deploy import ExportedPolicy

OBS_DIM, ACTION_DIM = 5, 2
SMALL = DenoiserConfig(hidden=[32, 32], time_dim=8)


def diffusion_policy(**overrides) -> DiffusionPolicy:
    config = DiffusionConfig(**{"chunk": ChunkConfig(horizon=4, act_steps=4), "denoiser": SMALL, **overrides})
    return DiffusionPolicy(OBS_DIM, ACTION_DIM, config)


@pytest.mark.parametrize("eta", [0.0, 1.0])
def test_ddim_step_matches_diffusers(eta):
    torch.manual_seed(0)
    policy = diffusion_policy(eta=eta, min_std=1e-12, inference_steps=10)
    reference = DDIMScheduler(
        num_train_timesteps=100, beta_schedule="squaredcos_cap_v2", clip_sample=True, set_alpha_to_one=True
    )
    reference.set_timesteps(10)
    cond = policy.encode({"policy": torch.randn(8, OBS_DIM)})
    x = torch.randn(8, 4, ACTION_DIM)
    for k, timestep in enumerate(reference.timesteps):
        with torch.no_grad():
            output = policy.denoiser(x, torch.full((8,), timestep / 100), torch.zeros(8), cond)
        noise = torch.randn_like(x)
        expected = reference.step(output, timestep, x, eta=eta, use_clipped_model_output=True, variance_noise=noise)
        for step in (k, torch.full((8,), k)):  # one step (floats) and a batch of steps (tensors)
            x0, eps = policy.predict(policy.coefficients(step), x, output)
            mean, std = policy.moments(policy.coefficients(step), x0, eps)
            torch.testing.assert_close(mean + std * noise, expected.prev_sample, rtol=1e-4, atol=1e-5)
        x = expected.prev_sample


def test_dppo_chain_floors_the_std_and_clips_the_noise():
    torch.manual_seed(0)
    policy = diffusion_policy(eta=0.0, min_std=0.1, noise_clip=2.0)
    obs = {"policy": torch.randn(256, OBS_DIM)}
    sample = policy.sample(obs)
    for k in range(policy.steps):
        x = sample.chain[:, k]
        t = torch.full((256,), policy.ddim_timesteps[k] / 100)
        with torch.no_grad():
            x0, eps = policy.predict(policy.coefficients(k), x, policy.denoiser(x, t, t * 0, policy.encode(obs)))
            mean, std = policy.moments(policy.coefficients(k), x0, eps)
        assert torch.allclose(std, torch.full_like(std, 0.1))  # η = 0: only the floor is left
        z = (sample.chain[:, k + 1] - mean) / std
        assert z.abs().max() <= 2.0 + 1e-4 and z.abs().max() > 1.5


class _GaussianDataVelocity(nn.Module):
    """The exact velocity of x_t = t·a + (1 − t)·ε for a ~ N(m, c²) (per element): E[a − ε | x_t]."""

    def __init__(self, mean: float, std: float):
        super().__init__()
        self.mean, self.var = mean, std**2

    def forward(self, x, t, delta, cond):
        return self.decode(x, self.condition(t, delta, cond))

    def condition(self, t, delta, cond):
        return t[:, None]

    def decode(self, x, features):
        t = features[:, :, None]
        variance = t**2 * self.var + (1 - t) ** 2
        centred = x - t * self.mean
        return self.mean + (t * self.var - (1 - t)) * centred / variance


@pytest.mark.parametrize("chain_noise", ["sde", "reinflow"])
def test_stochastic_flow_chains_keep_the_data_distribution(chain_noise):
    """The ODE→SDE conversion keeps the flow's marginals exactly (up to discretisation); ReinFlow's bounded
    noise (mean 0.12 over 50 steps) only adds variance on top — the reason its std range is small."""
    torch.manual_seed(0)
    config = FlowConfig(chunk=ChunkConfig(horizon=1, act_steps=1), steps=50, chain_noise=chain_noise)
    policy = FlowPolicy(OBS_DIM, ACTION_DIM, config)
    policy.denoiser = _GaussianDataVelocity(mean=0.3, std=0.2)
    obs = {"policy": torch.zeros(20_000, OBS_DIM)}
    with torch.no_grad():
        samples = policy.sample(obs).chain[:, -1]
        ode = policy.sample(obs, noise_scale=0.0).chain[:, -1]
    assert torch.allclose(ode, torch.full_like(ode, 0.3), atol=1e-3)  # x_0 = 0 flows to the mode
    assert abs(float(samples.mean()) - 0.3) < 0.01
    if chain_noise == "sde":
        assert abs(float(samples.std()) - 0.2) < 0.015
    else:
        assert float(samples.std()) > 0.2


def test_initial_noise_narrows_the_samples_around_the_deterministic_path_and_keeps_log_probs_exact():
    """x_0 ~ N(0, s²·I): the flow of Gaussian data is affine in x (Euler steps too), so the samples' spread
    shrinks by s (ReinFlow noise at its floor adds next to nothing); x_0's density is not in log_prob, so
    rescoring still matches."""
    chunk = ChunkConfig(horizon=1, act_steps=1)
    spread = {}
    for initial_noise in (1.0, 0.5):
        torch.manual_seed(0)
        config = FlowConfig(chunk=chunk, steps=20, noise_std_range=(MIN_STD, MIN_STD), initial_noise=initial_noise)
        policy = FlowPolicy(OBS_DIM, ACTION_DIM, config)
        policy.denoiser = _GaussianDataVelocity(mean=0.3, std=0.2)
        obs = {"policy": torch.zeros(20_000, OBS_DIM)}
        with torch.no_grad():
            sample = policy.sample(obs)
            rescored, _ = policy.log_prob(obs, sample.chain)
        assert abs(float(sample.chain[:, 0].std()) - initial_noise) < 0.02
        assert torch.allclose(rescored, sample.log_prob, atol=1e-3)
        spread[initial_noise] = float(sample.chain[:, -1].std())
    assert spread[0.5] / spread[1.0] == pytest.approx(0.5, abs=0.02)
    with pytest.raises(ConfigError, match="initial_noise"):
        FlowConfig(initial_noise=1.5)


def test_sde_chain_needs_two_steps():
    with pytest.raises(ConfigError, match="steps"):
        FlowConfig(chain_noise="sde", steps=1)


def test_unet_horizon_must_divide():
    config = DiffusionConfig(
        chunk=ChunkConfig(horizon=6, act_steps=4),
        denoiser=DenoiserConfig(kind="unet", unet_channels=[16, 32, 64]),
    )
    with pytest.raises(ConfigError, match="horizon"):
        DiffusionPolicy(OBS_DIM, ACTION_DIM, config)


def test_reinflow_noise_stays_in_its_range():
    torch.manual_seed(0)
    config = FlowConfig(chunk=ChunkConfig(horizon=4, act_steps=2), denoiser=SMALL, noise_std_range=(0.05, 0.2))
    policy = FlowPolicy(OBS_DIM, ACTION_DIM, config)
    for parameter in policy.noise_net.parameters():
        nn.init.normal_(parameter, std=3.0)  # push the head to its bounds
    std = policy.noise_net(torch.randn(512, 4, ACTION_DIM), torch.rand(512), torch.randn(512, OBS_DIM))
    assert std.min() >= 0.05 and std.max() <= 0.2 and std.max() - std.min() > 0.1


def test_chunked_actor_executes_chunks_and_restarts_histories():
    torch.manual_seed(0)
    config = FlowConfig(chunk=ChunkConfig(n_obs_steps=2, horizon=4, act_steps=3), denoiser=SMALL, steps=2)
    policy = FlowPolicy(OBS_DIM, ACTION_DIM, config).eval()
    actor = ChunkedActor(policy, num_envs=2)
    observations = [torch.randn(2, OBS_DIM) for _ in range(7)]
    actions = []
    for t, obs in enumerate(observations):
        if t == 4:
            actor.episodes_ended(torch.tensor([True, False]))  # env 0 starts a new episode at step 4
        actions.append(actor({"policy": obs}))
    first = policy.act({"policy": torch.stack([observations[0], observations[0]], dim=1)})
    for t in range(3):  # steps 0-2: the first chunk, planned on a history of the first observation repeated
        torch.testing.assert_close(actions[t], first[:, t])
    replanned = policy.act({"policy": torch.stack([observations[2], observations[3]], dim=1)})
    torch.testing.assert_close(actions[3], replanned[:, 0])  # step 3: both plan again on their last two obs
    restarted = policy.act({"policy": torch.stack([observations[4], observations[4]], dim=1)})
    torch.testing.assert_close(actions[4][0], restarted[0, 0])  # env 0: new episode, fresh history and chunk
    torch.testing.assert_close(actions[4][1], replanned[1, 1])  # env 1 carries on with its chunk
    latest = policy.act({"policy": torch.stack([observations[5], observations[6]], dim=1)})
    torch.testing.assert_close(actions[6][1], latest[1, 0])  # env 1: its chunk ran out after 3 actions
    torch.testing.assert_close(actions[6][0], restarted[0, 2])  # env 0 is still on its chunk from step 4


def test_residual_starts_as_its_base_and_trains_only_itself():
    torch.manual_seed(0)
    base = FlowPolicy(OBS_DIM, ACTION_DIM, FlowConfig(chunk=ChunkConfig(horizon=4, act_steps=2), denoiser=SMALL))
    policy = ResidualPolicy(base, OBS_DIM, ResidualConfig(hidden=[32, 32], scale=0.2))
    obs = {"policy": torch.randn(64, OBS_DIM)}
    assert (policy.act(obs) - base.act(obs)).abs().max() < 1e-2
    before = {k: v.clone() for k, v in base.state_dict().items()}
    optimizer = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=1e-2)
    policy.train()
    for _ in range(20):
        sample = policy.sample(obs)
        loss = -(policy.log_prob(obs, sample.chain.detach())[0] * sample.chain.detach().sum((1, 2))).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert all(torch.equal(before[k], v) for k, v in base.state_dict().items())
    assert not base.training  # the base stays in eval mode inside a training residual
    assert (policy.act(obs) - base.act(obs)).abs().max() > 1e-2


def test_per_step_residual_corrects_every_action_of_its_bases_chunks(tmp_path):
    """ResiP's closed loop: the base's chunks run as they would alone (history, replanning, episode restarts) and
    each executed action gets its own correction from the state at that step; the exported pair of graphs,
    deployed one observation at a time, repeats the simulator's actions."""
    torch.manual_seed(0)
    config = FlowConfig(chunk=ChunkConfig(n_obs_steps=2, horizon=4, act_steps=3), denoiser=SMALL, steps=2)
    base = FlowPolicy(OBS_DIM, ACTION_DIM, config).eval()
    policy = ResidualPolicy(base, OBS_DIM, ResidualConfig(hidden=[32, 32], scale=0.3, per_step=True, out_gain=1.0))
    policy.eval()
    alone, corrected = ChunkedActor(base, num_envs=2), ChunkedActor(policy, num_envs=2)
    observations = [torch.randn(2, OBS_DIM) for _ in range(7)]
    base_actions, actions = [], []
    for t, obs in enumerate(observations):
        if t == 4:
            for actor in (alone, corrected):
                actor.episodes_ended(torch.tensor([True, False]))
        base_actions.append(alone({"policy": obs}))
        actions.append(corrected({"policy": obs}))
    for obs, base_action, action in zip(observations, base_actions, actions, strict=True):
        _, mean, _ = policy.distribution({"policy": obs, "base_action": base_action})
        torch.testing.assert_close(action, (base_action + 0.3 * mean[:, 0]).clamp(-1, 1))
        assert (action - base_action).abs().max() > 1e-2  # the correction is not nothing
    path = export(policy, tmp_path / "policy.onnx", "onnx")
    assert json.loads(description_path(path).read_text())["base"] == "policy_base.onnx"
    deployed = ExportedPolicy(path)
    for obs, action in zip(observations, actions, strict=True):  # env 1 runs without a restart
        np.testing.assert_allclose(deployed(obs[1].numpy()), action[1].numpy(), atol=1e-5)


@pytest.mark.parametrize("config_class", [DiffusionConfig, FlowConfig])
def test_a_chunked_policy_reads_the_observation_its_encoder_names_and_images_only_if_told(config_class):
    from policyforge.algos.run_config import RunConfig
    from policyforge.config import load
    from policyforge.policies.base import EnvSpec
    from policyforge.policies.encoders import EncoderConfig

    spec = EnvSpec({"policy": (7,), "critic": (11,), "image": (2, 16, 16, 3)}, 3)
    seeing = config_class(encoder=EncoderConfig(obs_key="critic")).build(spec)
    assert seeing.obs_keys == ("critic", "image") and seeing.state_dim == 11
    blind = config_class(encoder=EncoderConfig(obs_key="critic", images=False))
    assert not blind.reads_images
    policy = blind.build(spec)
    assert policy.obs_keys == ("critic",) and policy.image_shape is None
    action = policy.act({"critic": torch.randn(4, policy.n_obs_steps, 11)})
    assert action.shape == (4, policy.chunk_len, 3)
    with pytest.raises(ConfigError, match=r"policy.encoder.obs_key: the env has the observations \['policy'\]"):
        blind.build(EnvSpec({"policy": (7,)}, 3))
    recipe = "configs/lift-dppo-learned-reward.yaml"  # cameras rendered on request for the reward model alone
    assert not load(RunConfig, recipe).policy.reads_images
    with pytest.raises(ConfigError, match=r"sim.image.render: the diffusion policy reads the images every step"):
        load(RunConfig, recipe, ["policy.encoder.images=true"])
