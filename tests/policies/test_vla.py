"""The VLA's parts beyond the shared contract (tests/policies/test_policy_contract.py has its variants): the real
pretrained encoders load offline with every weight matched, the instruction reaches the policy as token ids from
the env, the prefix is computed once per decision, and bad inputs are refused by name."""

import dataclasses

import pytest
import torch

from policyforge.config import ConfigError
from policyforge.policies.base import EnvSpec
from policyforge.policies.chunked import ChunkConfig
from policyforge.policies.efficientnet import load_pretrained_efficientnet, pretrained_file
from policyforge.policies.language import InstructionEncoder, minilm
from policyforge.policies.vla import VisionConfig, VLAConfig, VLAPolicy
from policyforge.policies.vla_networks import pooled
from policyforge.sims.instruction_obs import INSTRUCTION_KEY, INSTRUCTION_TOKENS, PAD_ID, tokenizer
from tests.policies.perturb import chains_before_and_after_a_step

TINY = {"width": 32, "heads": 2, "prefix_layers": 1, "expert_layers": 1, "time_dim": 16, "steps": 4}
CHUNK = ChunkConfig(n_obs_steps=1, horizon=4, act_steps=2)
IMAGE_SHAPE = (2, 32, 32, 3)


def tiny_vla(**overrides) -> VLAPolicy:
    config = VLAConfig(
        **{"chunk": CHUNK, **TINY, "vision": VisionConfig(encoder="scratch", scratch_channels=8)} | overrides
    )
    return VLAPolicy(5, 3, config, IMAGE_SHAPE).eval()


def clone(policy: VLAPolicy, obs: dict[str, torch.Tensor], target: torch.Tensor, steps: int) -> None:
    """`steps` Adam steps (lr 3e-3) of `bc_loss` on one fixed batch of chunks `target` [B, H, A]; leaves it in eval."""
    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-3)
    policy.train()
    for _ in range(steps):
        loss = policy.bc_loss(obs, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    policy.eval()


def observations(policy: VLAPolicy, texts: list[str]) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    obs = policy.example_obs(len(texts))
    obs["policy"] = torch.randn(obs["policy"].shape, generator=generator)
    obs["image"] = torch.randint(0, 256, obs["image"].shape, generator=generator, dtype=torch.uint8)
    obs[INSTRUCTION_KEY] = tokenizer()(texts)
    return obs


def test_minilm_loads_offline_and_gives_token_features(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    texts = ["This is an example sentence", "lift the red cube", "pick up the red cube", "push the blue cube left"]
    features, mask = InstructionEncoder(INSTRUCTION_TOKENS)(tokenizer()(texts))
    assert features.shape == (4, INSTRUCTION_TOKENS, 384) and mask.shape == (4, INSTRUCTION_TOKENS)
    assert mask[0].sum() == 7  # [CLS] this is an example sentence [SEP]
    pooled = (features * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    pooled = torch.nn.functional.normalize(pooled, dim=-1)
    # sentence-transformers' all-MiniLM-L6-v2 embedding of this sentence (mean pooling, normalised) starts so
    reference = torch.tensor([0.0676569, 0.0634960, 0.0487132, 0.0793049])
    torch.testing.assert_close(pooled[0, :4], reference, atol=2e-4, rtol=0)
    similarity = pooled @ pooled.T
    assert similarity[1, 2] > similarity[1, 3] > similarity[1, 0]  # a paraphrase is nearer than another task


def test_instruction_features_are_cached_per_distinct_instruction():
    encoder = InstructionEncoder(INSTRUCTION_TOKENS)
    ids = tokenizer()(["lift the red cube", "lift the blue cube", "lift the red cube"] * 5)
    first, _ = encoder(ids)
    assert encoder.misses == 2
    again, _ = encoder(ids.flip(0))
    assert encoder.misses == 2 and torch.equal(again, first.flip(0))
    direct = minilm()(ids.long(), ids != PAD_ID)
    torch.testing.assert_close(first, direct, atol=1e-5, rtol=0)  # the cache stores the network's own output


def test_efficientnet_lite0_state_dict_loads_with_every_key_matched():
    network = load_pretrained_efficientnet(5)
    weights = torch.load(pretrained_file(), map_location="cpu", weights_only=True)
    own = network.state_dict()
    assert set(own) == set(weights) and len(own) == 296
    assert all(own[k].shape == weights[k].shape and torch.equal(own[k], weights[k]) for k in weights)
    frames = torch.randint(0, 256, (2, 64, 64, 3), dtype=torch.uint8)
    features = network(frames)  # as built, before any train() or eval() call
    assert features.shape == (2, 112, 4, 4)  # stride 16
    torch.testing.assert_close(network(frames[:1]), features[:1])  # a frame's features do not depend on its batch
    assert all(torch.equal(own[k], weights[k]) for k in weights), "the pretrained statistics stay as loaded"
    network.train()(frames)
    assert not any(m.training for m in network.modules() if isinstance(m, torch.nn.BatchNorm2d))
    assert all(torch.equal(network.state_dict()[k], weights[k]) for k in weights)
    finer = load_pretrained_efficientnet(3)(torch.randint(0, 256, (2, 64, 64, 3), dtype=torch.uint8))
    assert finer.shape == (2, 40, 8, 8)  # stride 8: 64 tokens a view
    with pytest.raises(ConfigError, match="efficientnet_stages"):
        VisionConfig(efficientnet_stages=2)


def test_pretrained_vision_is_frozen_and_act_is_noise_off_sample():
    policy = tiny_vla(vision=VisionConfig(encoder="efficientnet_lite0"))
    obs = observations(policy, ["lift the red cube", "put the green cube on the yellow pad"])
    assert torch.equal(policy.act(obs), policy.sample(obs, noise_scale=0.0).action)
    trainable = {name for name, p in policy.named_parameters() if p.requires_grad}
    assert not any(name.startswith("encoder.vision.") for name in trainable)
    assert any(name.startswith("encoder.blocks.") for name in trainable)
    sample = policy.sample(obs)
    torch.testing.assert_close(policy.log_prob(obs, sample.chain)[0], sample.log_prob, atol=1e-3, rtol=1e-5)


def test_prefix_is_computed_once_per_decision():
    policy = tiny_vla()
    obs = observations(policy, ["lift the red cube"] * 3)
    calls = []
    policy.encoder.register_forward_hook(lambda *_: calls.append(1))
    policy.act(obs)
    policy.sample(obs)
    assert len(calls) == 2  # one prefix per decision, whatever the number of denoising steps (4)


def test_the_instruction_changes_the_action():
    torch.manual_seed(0)
    policy = tiny_vla()
    obs = observations(policy, ["lift the red cube"] * 2)
    other = {**obs, INSTRUCTION_KEY: tokenizer()(["push the blue cube to the left zone"] * 2)}
    assert not torch.allclose(policy.act(obs), policy.act(other))


def test_bad_inputs_are_refused_naming_the_field():
    policy = tiny_vla()
    obs = observations(policy, ["lift the red cube", "lift the blue cube"])
    with pytest.raises(ValueError, match=r"obs\.instruction: .*none were given"):
        policy.act({k: v for k, v in obs.items() if k != INSTRUCTION_KEY})
    missing = obs[INSTRUCTION_KEY].clone()
    missing[1] = PAD_ID
    with pytest.raises(ValueError, match=r"obs\.instruction: row 1 is not a tokenized instruction"):
        policy.act({**obs, INSTRUCTION_KEY: missing})
    with pytest.raises(ValueError, match=r"obs\.instruction: expected token ids int"):
        policy.act({**obs, INSTRUCTION_KEY: obs[INSTRUCTION_KEY].float()})
    with pytest.raises(ValueError, match=r"obs\.image: expected uint8 \[B, 1, 2, 32, 32, 3\]"):
        policy.act({**obs, "image": obs["image"][..., :16, :16, :]})
    with pytest.raises(ValueError, match="instruction: expected a non-empty text"):
        tokenizer()(["lift the red cube", "  "])
    with pytest.raises(ValueError, match=r"instruction: .* more than INSTRUCTION_TOKENS"):
        tokenizer()(["lift the red cube " * 10])
    state_only = EnvSpec({"policy": (5,), "instruction": (INSTRUCTION_TOKENS,)}, 3)
    with pytest.raises(ConfigError, match=r"policy\.class.*obs\['image'\]"):
        VLAConfig(**TINY).build(state_only)
    with pytest.raises(ValueError, match=r"obs\.instruction: the env gives no instruction"):
        policy.input_state(2).push({k: v for k, v in obs.items() if k != INSTRUCTION_KEY})


def test_instructed_env_observes_token_ids_and_the_vla_runs_in_it():
    from policyforge.policies.rollout import ChunkedActor
    from policyforge.sims.config import ImageConfig, SimConfig
    from policyforge.sims.make import make_env
    from policyforge.sims.vec_env import check_step_result

    env = make_env(
        SimConfig(task="arm-instructed", num_envs=2, image=ImageConfig(cameras=["front"], width=32, height=32))
    )
    try:
        obs = env.reset(seed=0)
        assert obs[INSTRUCTION_KEY].dtype == torch.int32
        assert torch.equal(obs[INSTRUCTION_KEY], tokenizer()(env.instructions()))
        spec = EnvSpec(env.obs_shapes, env.action_dim)
        policy = VLAConfig(
            **{"chunk": CHUNK, **TINY, "vision": VisionConfig(encoder="scratch", scratch_channels=8)}
        ).build(spec)
        actor = ChunkedActor(policy, env.num_envs)
        for _ in range(3):
            result = env.step(actor(obs))
            check_step_result(env, result)
            obs = result[0]
    finally:
        env.close()


def test_bc_windows_carry_each_episodes_instruction(tmp_path):
    import numpy as np

    from policyforge.algos.bc import DemoWindows
    from policyforge.data.dataset import DatasetError, Demonstrations, DemoWriter
    from policyforge.data.layout import TASKS_PATH

    writer = DemoWriter(tmp_path / "demos", fps=25, state_dim=5, action_dim=3, task_name="arm-instructed")
    said = ["lift the red cube", "push the blue cube to the left zone", "lift the red cube"]
    for episode, text in enumerate(said):
        states = np.full((6, 5), float(episode))  # the episode is readable from its states
        writer.add_episode(states, np.zeros((6, 3)), np.zeros(6), np.arange(6) == 5, np.zeros(6, bool), None, text)
    demos = Demonstrations(tmp_path / "demos")
    windows = DemoWindows(demos, "policy", 1, 4, [], instructions=True)
    obs, _ = windows.sample(64)
    expected = tokenizer()([said[int(e)] for e in obs["policy"][:, -1, 0]])
    assert torch.equal(obs[INSTRUCTION_KEY], expected)
    assert "instruction" not in DemoWindows(demos, "policy", 1, 4, []).sample(2)[0]  # only for policies reading it
    (tmp_path / "demos" / TASKS_PATH).unlink()
    with pytest.raises(DatasetError, match=r"no task instructions \(meta/tasks.parquet"):
        DemoWindows(Demonstrations(tmp_path / "demos"), "policy", 1, 4, [], instructions=True)


@pytest.mark.parametrize("frozen_steps", [1, 3])
def test_frozen_early_steps_run_the_frozen_copy_of_the_backbone(frozen_steps):
    """DPPO's trainable_steps on a VLA (segments of one step too): the frozen steps' prefix comes from the frozen
    copy, so perturbing the trainable weights leaves x_0 … x_frozen unchanged, and rescoring stays exact."""
    torch.manual_seed(0)
    policy = tiny_vla()
    policy.freeze_early_steps(frozen_steps)
    obs = observations(policy, ["lift the red cube", "push the blue cube to the left zone"])
    sample = policy.sample(obs)
    torch.testing.assert_close(policy.log_prob(obs, sample.chain)[0], sample.log_prob, atol=1e-3, rtol=1e-5)

    before, after = chains_before_and_after_a_step(policy, obs)  # [B, K + 1, H, A] each
    assert torch.equal(after[:, : frozen_steps + 1], before[:, : frozen_steps + 1])
    assert (after[:, frozen_steps + 1 :] - before[:, frozen_steps + 1 :]).abs().mean() > 1e-3


@pytest.mark.parametrize(
    "options",
    [
        {"variant": "shortcut", "steps": 2},
        {"variant": "meanflow", "steps": 1},  # its target is a jvp through the expert's attention
        {"chain_noise": "sde", "stochastic_steps": "one"},
    ],
    ids=["shortcut", "meanflow", "sde_one_step"],
)
def test_the_flow_policys_variants_and_chains_run_on_the_vla(options):
    torch.manual_seed(0)
    policy = tiny_vla(**options)
    obs = observations(policy, ["lift the red cube", "push the blue cube to the left zone"] * 4)
    policy.train()
    loss = policy.bc_loss(obs, torch.rand(8, 4, 3) * 2 - 1)
    loss.backward()
    assert torch.isfinite(loss) and policy.denoiser.action_out.weight.grad.abs().sum() > 0
    policy.eval()
    sample = policy.sample(obs)
    torch.testing.assert_close(policy.log_prob(obs, sample.chain)[0], sample.log_prob, atol=1e-3, rtol=1e-5)
    assert torch.equal(policy.act(obs), policy.sample(obs, noise_scale=0.0).action)


def test_checked_export_runs_the_text_encoder_inside_the_graph(tmp_path):
    """`policyforge export`'s path: checked on many random instructions, the description names the input, and the
    graph refuses instruction ids of another dtype by name."""
    from policyforge.policies.export import check_observations, export_checked, load_exported
    from policyforge.policies.export_description import load_description

    torch.manual_seed(0)
    policy = tiny_vla()
    obs = check_observations(policy, 64)
    assert len(torch.unique(obs[INSTRUCTION_KEY], dim=0)) > 50
    path = tmp_path / "policy.pt"
    assert export_checked(policy, path, "torchscript", obs) <= policy.export_tolerance
    entry = load_description(path)["observation"]["instruction"]
    assert entry["dtype"] == "int32" and entry["shape"] == ["B", INSTRUCTION_TOKENS] and "inside" in entry["values"]
    run = load_exported(path)
    arrays = [obs[key][:2].numpy() for key in policy.obs_keys]
    with pytest.raises(ValueError, match=r"input 'instruction' must be \[B, 24\] int32"):
        run(*arrays[:2], arrays[2].astype("int64"))


def test_bc_learns_actions_that_only_the_instruction_tells_apart():
    """Same state, same images, two instructions, opposite actions: only the language path can fit them."""
    torch.manual_seed(0)
    policy = tiny_vla()
    said = ["lift the red cube", "push the blue cube to the left zone"]
    obs = observations(policy, said * 16)
    obs = {
        **obs,
        "policy": obs["policy"][:1].expand_as(obs["policy"]),
        "image": obs["image"][:1].expand_as(obs["image"]),
    }
    target = torch.tensor([0.6, -0.6]).repeat(16)[:, None, None].expand(-1, 4, 3)
    clone(policy, obs, target, steps=150)
    assert (policy.act(obs) - target).abs().mean() < 0.15


def test_an_instructed_task_runs_without_the_vla_extra(monkeypatch):
    """Without the tokenizer an instructed env observes no token ids (state policies need none), and a VLA
    refuses it by name."""
    from policyforge.sims import instruction_obs
    from policyforge.sims.config import SimConfig
    from policyforge.sims.make import make_env

    monkeypatch.setattr(instruction_obs, "tokenizer_installed", lambda: False)
    env = make_env(SimConfig(task="arm-instructed", num_envs=1))
    try:
        assert INSTRUCTION_KEY not in env.obs_shapes and env.instructions()
        spec = EnvSpec({**env.obs_shapes, "image": IMAGE_SHAPE}, env.action_dim)
        with pytest.raises(ConfigError, match=r"obs\['instruction'\].*`vla` extra"):
            VLAConfig(**TINY).build(spec)
    finally:
        env.close()


def test_the_scratch_stem_shifts_images_while_training_only():
    torch.manual_seed(0)
    policy = tiny_vla()  # the scratch stem, random_shift 4
    obs = observations(policy, ["lift the red cube", "touch the blue cube"])
    assert torch.equal(policy.encode(obs), policy.encode(obs)), "evaluation sees the images as they are"
    policy.train()
    assert not torch.equal(policy.encode(obs), policy.encode(obs)), "BC sees them shifted, differently each time"
    still = tiny_vla(vision=VisionConfig(encoder="scratch", scratch_channels=8, random_shift=0)).train()
    assert torch.equal(still.encode(obs), still.encode(obs))
    with pytest.raises(ConfigError, match="random_shift"):
        VisionConfig(random_shift=-1)


def test_the_scratch_stride_sets_the_token_grid():
    obs_images = torch.zeros(2, 64, 64, 3, dtype=torch.uint8)
    for stride, grid in ((16, 4), (8, 8)):
        stem, built_stride = VisionConfig(encoder="scratch", scratch_channels=8, scratch_stride=stride).build()
        assert built_stride == stride
        assert stem(obs_images).shape[-2:] == (grid, grid)
    with pytest.raises(ConfigError, match="scratch_stride: must be one of"):
        VisionConfig(encoder="scratch", scratch_stride=4)


def grounding_batch(policy: VLAPolicy, size: int, generator: torch.Generator) -> tuple[dict, torch.Tensor]:
    """A red and a blue 4 × 4 square at random places of the first view; the instruction names one; the action
    chunk is the named square's place in [-1, 1]² (and 0)."""
    obs = observations(policy, ["touch the red cube"] * size)
    image = torch.full(obs["image"].shape, 120, dtype=torch.uint8)
    places = torch.randint(2, 26, (size, 2, 2), generator=generator)
    colours = {"red": (220, 30, 30), "blue": (30, 60, 220)}
    for i in range(size):
        for k, rgb in enumerate(colours.values()):
            y, x = places[i, k].tolist()
            image[i, 0, 0, y : y + 4, x : x + 4] = torch.tensor(rgb, dtype=torch.uint8)
    named = torch.randint(0, 2, (size,), generator=generator)
    obs["image"] = image
    obs[INSTRUCTION_KEY] = tokenizer()([f"touch the {list(colours)[k]} cube" for k in named.tolist()])
    place = (places[torch.arange(size), named].float() + 2 - 16) / 16
    return obs, torch.cat([place, torch.zeros(size, 1)], 1)[:, None].expand(-1, CHUNK.horizon, 3)


@pytest.mark.slow
def test_the_vla_grounds_the_named_object():
    """Which square to reach only the instruction says and where it is only the image: guessing between the two
    errs 0.26 on average; FiLM on the image tokens learns to find the named one (0.05 at 1,500 steps, measured;
    without it the error stays at 0.26 — VLAConfig.language_film)."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    vision = VisionConfig(encoder="scratch", scratch_channels=8, scratch_stride=8, random_shift=0)
    policy = tiny_vla(vision=vision)
    test_obs, test_target = grounding_batch(policy, 128, torch.Generator().manual_seed(99))
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
    policy.train()
    for _ in range(1000):
        loss = policy.bc_loss(*grounding_batch(policy, 64, generator))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    policy.eval()
    with torch.no_grad():
        error = (policy.act(test_obs) - test_target)[..., :2].abs().mean()
    midpoint = (test_target[:, 0, :2] - test_target[:, 0, :2].mean(0)).abs().mean()
    assert error < 0.12, f"place error {error:.3f} (the mean place's error: {midpoint:.3f})"


def test_the_privileged_auxiliary_loss_reads_the_datasets_environment_state(tmp_path):
    import numpy as np

    from policyforge.algos.bc import DemoWindows
    from policyforge.data.dataset import DatasetError, Demonstrations, DemoWriter

    writer = DemoWriter(tmp_path / "demos", 25, 5, 3, task_name="arm-instructed", env_state_dim=4)
    for episode in range(2):
        frame = np.arange(6, dtype=float)[:, None] + 10 * episode  # each row says its frame
        rest = (np.zeros((6, 3)), np.zeros(6), np.arange(6) == 5, np.zeros(6, bool))
        writer.add_episode(np.repeat(frame, 5, 1), *rest, None, "lift the red cube", np.repeat(frame, 4, 1))
    with pytest.raises(ValueError, match=r"env_states must be \[6, 4\].*got none"):
        writer.add_episode(np.zeros((6, 5)), *rest)
    windows = DemoWindows(Demonstrations(tmp_path / "demos"), "policy", 1, 4, [], privileged_key="critic")
    obs, _ = windows.sample(64)
    assert torch.equal(obs["critic"], obs["policy"][:, -1, :1].expand(-1, 4)), "the window's own frame's state"
    plain = DemoWriter(tmp_path / "plain", 25, 5, 3, task_name="arm-instructed")
    plain.add_episode(np.zeros((6, 5)), *rest, None, "lift the red cube")
    with pytest.raises(DatasetError, match=r"no observation\.environment_state.*privileged_aux_weight=0"):
        DemoWindows(Demonstrations(tmp_path / "plain"), "policy", 1, 4, [], privileged_key="critic")

    config = VLAConfig(
        **{"chunk": CHUNK, **TINY, "vision": VisionConfig(encoder="scratch", scratch_channels=8)},
        privileged_aux_weight=1.0,
    )
    spec = EnvSpec({"policy": (5,), "critic": (4,), "image": IMAGE_SHAPE, "instruction": (INSTRUCTION_TOKENS,)}, 3)
    policy = config.build(spec)
    assert policy.bc_privileged_key == "critic"
    batch = observations(policy, ["lift the red cube"] * 8)
    actions = torch.zeros(8, CHUNK.horizon, 3)
    torch.manual_seed(0)
    flow_only = policy.flow_loss(policy.encode(batch), actions)
    torch.manual_seed(0)
    total = policy.bc_loss({**batch, "critic": torch.randn(8, 4)}, actions)
    assert total > flow_only
    total.backward()
    assert policy.privileged_head[0].weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match=r"obs\.critic: .*privileged_aux_weight"):
        policy.bc_loss(batch, actions)
    without_critic = EnvSpec({k: v for k, v in spec.obs_shapes.items() if k != "critic"}, 3)
    with pytest.raises(ConfigError, match="privileged_aux_weight"):
        config.build(without_critic)
    fine_tuned = VLAConfig(**{"chunk": CHUNK, **TINY, "vision": config.vision}).build(spec)
    fine_tuned.load_pretrained(policy.state_dict())  # RL starts from BC's weights without BC's auxiliary head
    assert torch.equal(fine_tuned.denoiser.action_out.weight, policy.denoiser.action_out.weight)


def test_image_tokens_know_their_place_from_the_start():
    from policyforge.policies.vla_networks import grid_embedding

    places = grid_embedding(4, 4, 32)
    assert places.shape == (16, 32)
    distances = torch.cdist(places, places)
    assert distances[0, 1] < distances[0, 3] and distances[0, 4] < distances[0, 12], "nearer cells embed nearer"
    assert len({tuple(row.tolist()) for row in places}) == 16, "every cell its own"
    policy = tiny_vla()
    per_view = grid_embedding(2, 2, 32)  # 32 × 32 images, the scratch stem's stride 16
    assert torch.equal(policy.encoder.image_place, per_view.repeat(2, 1)), "each view's grid, in token order"
    assert "encoder.image_place" not in policy.state_dict(), "fixed, so not a weight a checkpoint must carry"


def test_the_estimate_token_gives_the_expert_the_heads_estimate_of_the_scene():
    spec = EnvSpec({"policy": (5,), "critic": (4,), "image": IMAGE_SHAPE, "instruction": (INSTRUCTION_TOKENS,)}, 3)
    vision = VisionConfig(encoder="scratch", scratch_channels=8)
    plain = VLAConfig(**{"chunk": CHUNK, **TINY, "vision": vision}).build(spec).eval()
    policy = VLAConfig(**{"chunk": CHUNK, **TINY, "vision": vision}, estimate_token=True).build(spec).eval()
    obs = observations(policy, ["lift the red cube", "touch the blue cube"])
    with torch.no_grad():
        prefix = policy.encode(obs)
        assert prefix.shape[1] == plain.encode(obs).shape[1] + 1
        estimate = policy.privileged_head(pooled(prefix[:, :-1]))
        assert torch.allclose(prefix[:, -1, :-1], policy.estimate_proj(estimate)) and (prefix[:, -1, -1] == 1).all()
    assert policy.bc_privileged_key is None, "without privileged_aux_weight BC asks the dataset for no state"
    with pytest.raises(ConfigError, match=r"policy.estimate_token: .*obs\['critic'\]"):
        VLAConfig(**{"chunk": CHUNK, **TINY, "vision": vision}, estimate_token=True).build(
            EnvSpec({k: v for k, v in spec.obs_shapes.items() if k != "critic"}, 3)
        )
    frozen = VLAConfig(**{"chunk": CHUNK, **TINY, "vision": vision}, estimate_token=True, freeze_backbone=True)
    frozen_policy = frozen.build(spec).eval()
    assert not any(p.requires_grad for p in frozen_policy.privileged_head.parameters())
    assert not any(p.requires_grad for p in frozen_policy.estimate_proj.parameters())
    cached = frozen_policy.precompute_frozen(obs)
    assert torch.equal(cached["prefix"], frozen_policy.encode(obs)), "the frozen prefix, its estimate token too"


def test_the_mlp_expert_reads_the_state_through_a_linear_readout_and_the_scene_as_the_estimate():
    spec = EnvSpec({"policy": (5,), "critic": (4,), "image": IMAGE_SHAPE, "instruction": (INSTRUCTION_TOKENS,)}, 3)
    vision = VisionConfig(encoder="scratch", scratch_channels=8)
    base = {"chunk": CHUNK, **TINY, "vision": vision, "expert": "mlp", "expert_hidden": [32, 32]}
    plain = VLAConfig(**{**base, "expert": "attention"}).build(spec).eval()
    policy = VLAConfig(**base).build(spec).eval()
    obs = observations(policy, ["lift the red cube", "touch the blue cube"])
    with torch.no_grad():
        prefix = policy.encode(obs)
        assert prefix.shape[1] == plain.encode(obs).shape[1] + 1 and (prefix[:, -1, -1] == 0).all()
        state = policy.encoder.normalizer(obs["policy"][:, None]).flatten(1)
        assert torch.allclose(prefix[:, -1, :-1], policy.readout_proj(state))
        assert torch.allclose(pooled(prefix), pooled(prefix[:, :-1])), "no pooling reads the readout"
    assert policy.denoiser.read_pooled, "without the estimate the scene reaches the MLP as the pooled prefix"

    estimating = VLAConfig(**base, estimate_token=True, freeze_backbone=True).build(spec).eval()
    assert not estimating.denoiser.read_pooled and estimating.estimate_proj is None
    assert estimating.readout_proj.in_features == 5 + 4, "the state and the head's estimate of the critic state"
    assert not any(p.requires_grad for p in estimating.readout_proj.parameters()), "frozen with the backbone"
    with torch.no_grad():
        prefix = estimating.encode(obs)
        estimate = estimating.privileged_head(pooled(prefix[:, :-1]))
        state = estimating.encoder.normalizer(obs["policy"][:, None]).flatten(1)
        assert torch.allclose(prefix[:, -1, :-1], estimating.readout_proj(torch.cat([state, estimate], dim=1)))
        assert torch.equal(estimating.precompute_frozen(obs)["prefix"], prefix), "the cached prefix is exact"


def test_without_the_prefix_state_the_scene_estimate_reads_only_the_images_and_the_instruction():
    """prefix_state: false keeps the arm's state out of the estimate (which otherwise learns to follow the arm)."""
    spec = EnvSpec({"policy": (5,), "critic": (4,), "image": IMAGE_SHAPE, "instruction": (INSTRUCTION_TOKENS,)}, 3)
    vision = VisionConfig(encoder="scratch", scratch_channels=8)
    base = {
        "chunk": CHUNK,
        **TINY,
        "vision": vision,
        "expert": "mlp",
        "expert_hidden": [32, 32],
        "estimate_token": True,
    }
    torch.manual_seed(0)
    with_state = VLAConfig(**base).build(spec).eval()
    torch.manual_seed(0)
    without = VLAConfig(**base, prefix_state=False).build(spec).eval()
    obs = observations(without, ["lift the red cube", "touch the blue cube"])
    moved = {**obs, "policy": obs["policy"] + 1.0}
    with torch.no_grad():
        assert without.encode(obs).shape[1] == with_state.encode(obs).shape[1] - 1, "no proprioception token"
        estimate = lambda policy, o: policy.privileged_head(pooled(policy.encode(o)[:, :-1]))  # noqa: E731
        assert torch.equal(estimate(without, obs), estimate(without, moved))
        assert not torch.allclose(estimate(with_state, obs), estimate(with_state, moved))
        assert not torch.allclose(without.act(obs), without.act(moved)), "the expert still reads the state"
    with pytest.raises(ConfigError, match=r"prefix_state: .*set expert: mlp"):
        VLAConfig(**{**base, "expert": "attention"}, prefix_state=False)


def test_bc_can_teach_the_expert_on_the_true_scene_and_the_head_on_its_estimate():
    """bc_true_estimate: the expert's flow loss reads the true privileged state (plus noise); the head learns it by
    the auxiliary loss alone; acting reads the estimate."""
    spec = EnvSpec({"policy": (5,), "critic": (4,), "image": IMAGE_SHAPE, "instruction": (INSTRUCTION_TOKENS,)}, 3)
    vision = VisionConfig(encoder="scratch", scratch_channels=8)
    base = {"chunk": CHUNK, **TINY, "vision": vision, "expert": "mlp", "expert_hidden": [32, 32]}
    estimating = {**base, "estimate_token": True, "privileged_aux_weight": 1.0, "prefix_state": False}
    policy = VLAConfig(**estimating, bc_true_estimate=0.0).build(spec).eval()  # no dropout: one prefix
    obs = observations(policy, ["lift the red cube", "touch the blue cube"])
    obs["critic"] = torch.randn(2, 4)
    actions = torch.randn(2, 4, 3)
    torch.manual_seed(1)
    loss = policy.bc_loss(obs, actions)
    prefix = policy.encode(obs)
    truth = policy.privileged_normalizer(obs["critic"])
    torch.manual_seed(1)
    expected = policy.flow_loss(policy._append(prefix[:, :-1], obs["policy"][:, None], truth), actions)
    assert torch.allclose(loss, expected + policy._privileged_error(policy._estimate(prefix), obs))
    policy.zero_grad()
    torch.manual_seed(1)
    policy.flow_loss(policy._append(prefix[:, :-1], obs["policy"][:, None], truth), actions).backward()
    assert all(p.grad is None or not p.grad.any() for p in policy.privileged_head.parameters()), "flow loss: no head"
    with torch.no_grad():
        readout = policy.encode(obs)[:, -1, :-1]
        state = policy.encoder.normalizer(obs["policy"][:, None]).flatten(1)
        estimate = policy.privileged_head(pooled(prefix[:, :-1]))
        assert torch.allclose(readout, policy.readout_proj(torch.cat([state, estimate], dim=1))), "acting: estimate"
    for wrong in ({"estimate_token": False}, {"privileged_aux_weight": 0.0}, {"bc_true_estimate": -1.0}):
        with pytest.raises(ConfigError, match="bc_true_estimate: "):
            VLAConfig(**{**estimating, "bc_true_estimate": 0.3, **wrong})


def test_the_attention_pooled_estimate_reads_valid_tokens_only_and_freezes_with_the_backbone():
    from policyforge.policies.vla_networks import AttentionPool

    torch.manual_seed(0)
    pool = AttentionPool(16, 2)
    prefix = torch.cat([torch.randn(3, 6, 16), torch.tensor([1.0, 1, 1, 0, 1, 0]).expand(3, 6)[:, :, None]], dim=-1)
    changed = prefix.clone()
    changed[:, 3, :-1] += 5.0  # an invalid token (padding, the readout)
    assert torch.equal(pool(prefix), pool(changed))
    changed[:, 1, :-1] += 5.0
    assert not torch.allclose(pool(prefix), pool(changed))
    spec = EnvSpec({"policy": (5,), "critic": (4,), "image": IMAGE_SHAPE, "instruction": (INSTRUCTION_TOKENS,)}, 3)
    vision = VisionConfig(encoder="scratch", scratch_channels=8)
    config = VLAConfig(chunk=CHUNK, **TINY, vision=vision, expert="mlp", estimate_token=True, estimate_pool="attention")
    policy = config.build(spec).eval()
    obs = observations(policy, ["lift the red cube", "touch the blue cube"])
    with torch.no_grad():
        prefix = policy.encode(obs)
        estimate = policy.privileged_head(policy.estimate_pool(prefix[:, :-1]))
        state = policy.encoder.normalizer(obs["policy"][:, None]).flatten(1)
        assert torch.allclose(prefix[:, -1, :-1], policy.readout_proj(torch.cat([state, estimate], dim=1)))
    frozen = dataclasses.replace(config, freeze_backbone=True).build(spec)
    assert not any(p.requires_grad for p in frozen.estimate_pool.parameters())


def test_the_mlp_expert_learns_a_feedback_law_on_fine_state_differences():
    """Action = 8 × (s0 − s1), clipped, on states a few hundredths apart: what closed-loop control needs."""
    torch.manual_seed(0)
    policy = tiny_vla(expert="mlp", expert_hidden=[64, 64], normalize_state=False)
    obs = observations(policy, ["lift the red cube"] * 256)
    states = 0.05 * torch.randn(256, 1, 5)
    target = (8 * (states[:, 0, 0] - states[:, 0, 1])).clamp(-1, 1)[:, None, None].expand(-1, 4, 3)
    obs = {**obs, "policy": states, "image": obs["image"][:1].expand_as(obs["image"])}
    clone(policy, obs, target, steps=300)
    with torch.no_grad():
        error = (policy.act(obs) - target).abs().mean()
    assert error < 0.1 * target.abs().mean(), f"act error {error:.3f} of mean |action| {target.abs().mean():.3f}"
