"""LeRobot's SmolVLA behind the policy contract (policies/smolvla.py), built offline from a tiny SmolVLM: act is the
noise-off sample and equals lerobot's own sampler, log_prob rescores the chain exactly, gradients reach exactly the
trainable parameters, bc_loss is SmolVLA's loss, a saved checkpoint loads from one config line, export is refused
by name, and our PPO runs an iteration on it. Runs in .venv-lerobot (`make test-lerobot`); elsewhere it is skipped."""

from pathlib import Path

import pytest
import torch

from tests.policies.perturb import chains_before_and_after_a_step

pytest.importorskip("lerobot", reason="LeRobot's SmolVLA needs the optional environment: make test-lerobot")

from policyforge.policies.chunked import ChunkConfig
from policyforge.policies.smolvla import SmolVLAFlowPolicy, SmolVLAPolicyConfig
from policyforge.policies.smolvla_networks import LANGUAGE_MASK, LANGUAGE_TOKENS, STATE
from policyforge.sims.instruction_obs import INSTRUCTION_KEY, tokenizer

IMAGE_SIZE = 32
"""Camera images are IMAGE_SIZE × IMAGE_SIZE."""


def write_tiny_smolvlm(directory: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, SmolVLMConfig, SmolVLMImageProcessor, SmolVLMProcessor
    from transformers.models.smolvlm.video_processing_smolvlm import SmolVLMVideoProcessor

    special = {
        "fake_image_token": "<fake_token_around_image>",
        "global_image_token": "<global-img>",
        "image_token": "<image>",
        "end_of_utterance_token": "<end_of_utterance>",
        "video_token": "<video>",
    }
    tokens = ["<pad>", *special.values(), *sorted(pre_tokenizers.ByteLevel.alphabet())]  # every byte: any text
    bpe = Tokenizer(models.BPE(vocab={token: i for i, token in enumerate(tokens)}, merges=[]))
    bpe.pre_tokenizer, bpe.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<pad>", extra_special_tokens=special)
    processor = SmolVLMProcessor(
        image_processor=SmolVLMImageProcessor(),
        tokenizer=tokenizer,
        video_processor=SmolVLMVideoProcessor(),
        image_seq_len=4,
    )
    processor.save_pretrained(directory)
    text = {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": len(tokenizer),
    }
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}
    config = SmolVLMConfig(
        text_config=text,
        vision_config={**vision, "image_size": IMAGE_SIZE, "patch_size": 8},
        scale_factor=2,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
    )
    config.save_pretrained(directory)
    return directory


OBS_DIM, ACTION_DIM, BATCH = 5, 3, 8
IMAGE_SHAPE = (1, IMAGE_SIZE, IMAGE_SIZE, 3)
INSTRUCTIONS = ("lift the red cube", "push the blue cube to the left zone", "put the green cube on the yellow pad")


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory) -> str:
    return str(write_tiny_smolvlm(tmp_path_factory.mktemp("tiny_smolvlm")))


def settings(tiny_vlm: str, **overrides) -> dict:
    return {
        "chunk": ChunkConfig(n_obs_steps=1, horizon=4, act_steps=2),
        "steps": 4,
        "vlm_model_name": tiny_vlm,
        "num_vlm_layers": 2,
        "max_state_dim": OBS_DIM,
        "max_action_dim": ACTION_DIM,
        "image_size": IMAGE_SIZE,
        "tokenizer_max_length": 48,  # SmolVLA's; the tiny tokenizer spends a token per byte
        **overrides,
    }


def smolvla(tiny_vlm: str, frozen_steps: int = 0, **overrides) -> SmolVLAFlowPolicy:
    torch.manual_seed(1)
    policy = SmolVLAFlowPolicy(OBS_DIM, ACTION_DIM, SmolVLAPolicyConfig(**settings(tiny_vlm, **overrides)), IMAGE_SHAPE)
    policy.freeze_early_steps(frozen_steps)
    return policy


def observations(policy: SmolVLAFlowPolicy, batch: int = BATCH, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, len(INSTRUCTIONS), (batch,), generator=generator)
    obs = {
        "policy": 3.0 + 2.0 * torch.randn(batch, OBS_DIM, generator=generator),
        "image": torch.randint(0, 256, (batch, *IMAGE_SHAPE), generator=generator, dtype=torch.uint8),
        INSTRUCTION_KEY: tokenizer()([INSTRUCTIONS[i] for i in picks]),
    }
    policy.update_normalizer(obs)
    return obs


VARIANTS = {
    "flow_noise": {},
    "flow_sde": {"chain_noise": "sde"},
    "flow_sde_one_step": {"chain_noise": "sde", "stochastic_steps": "one"},
    "flow_noise_frozen_steps": {"frozen_steps": 2},
    "padded_actions": {"max_action_dim": 8, "max_state_dim": 8},
}


@pytest.fixture(params=list(VARIANTS))
def policy(request, tiny_vlm):
    return smolvla(tiny_vlm, **VARIANTS[request.param])


def test_act_is_sample_without_noise(policy):
    obs = observations(policy)
    policy.eval()
    act = policy.act(obs)
    assert torch.equal(act, policy.sample(obs, noise_scale=0.0).action)
    noisy = policy.sample(obs).action
    assert noisy.shape == (BATCH, 4, ACTION_DIM) and not torch.allclose(noisy, act) and noisy.abs().max() <= 1.0


def test_log_prob_rescores_the_sampled_chain(policy):
    obs = observations(policy)
    policy.eval()
    sample = policy.sample(obs)
    log_prob, entropy = policy.log_prob(obs, sample.chain)
    torch.testing.assert_close(log_prob, sample.log_prob, rtol=1e-5, atol=1e-3)
    assert torch.isfinite(log_prob).all() and torch.isfinite(entropy).all()
    elements, _ = policy.step_log_probs(obs, sample.chain)
    steps = 1 if isinstance(sample.chain, dict) else policy.steps - policy.frozen_steps
    assert elements.shape == (BATCH, steps, 4, ACTION_DIM)
    shifted = {k: v + 0.05 * torch.randn_like(v) if v.is_floating_point() else v for k, v in sample.chain.items()} \
        if isinstance(sample.chain, dict) else sample.chain + 0.05 * torch.randn_like(sample.chain)  # fmt: skip
    assert not torch.allclose(policy.log_prob(obs, shifted)[0], log_prob)


def test_gradients_reach_exactly_the_trainable_parameters(policy):
    obs = observations(policy)
    sample = policy.sample(obs)
    chain = (
        {k: v.detach() for k, v in sample.chain.items()} if isinstance(sample.chain, dict) else sample.chain.detach()
    )
    log_prob, entropy = policy.log_prob(obs, chain)
    (log_prob + entropy).sum().backward()
    trainable = {name for name, p in policy.named_parameters() if p.requires_grad}
    for name, parameter in policy.named_parameters():
        if name in trainable:
            assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
        else:
            assert parameter.grad is None, name
    # train_expert_only: SmolVLM (vision, text layers) stays frozen; the expert, projections, noise net train
    assert not any(".vlm_with_expert.vlm." in name for name in trainable)
    assert any(".lm_expert." in name for name in trainable) and any("action_out_proj" in name for name in trainable)
    assert all(not name.startswith("base.") for name in trainable)
    assert bool(policy.frozen_steps) == any(name.startswith("base.") for name, _ in policy.named_parameters())


def test_act_is_lerobots_own_sampler_from_zero_noise(tiny_vlm):
    """Our chain code, run noise-free, integrates exactly what lerobot's predict_action_chunk does from x = 0."""
    policy = smolvla(tiny_vlm).eval()
    obs = observations(policy)
    batch = policy.lerobot_batch(obs)
    lerobot = policy.encoder.smolvla
    inputs = {STATE: policy.normalizer(batch[STATE]), LANGUAGE_TOKENS: batch[LANGUAGE_TOKENS]}
    inputs |= {
        LANGUAGE_MASK: batch[LANGUAGE_MASK],
        policy.encoder.camera_keys[0]: batch["image"][:, 0].permute(0, 3, 1, 2) / 255.0,
    }
    theirs = lerobot.predict_action_chunk(inputs, noise=torch.zeros(BATCH, 4, ACTION_DIM))
    torch.testing.assert_close(policy.act(obs), theirs.clamp(-1, 1), rtol=1e-5, atol=1e-5)


def test_the_instruction_reaches_smolvla_as_text_in_its_own_tokens(tiny_vlm):
    policy = smolvla(tiny_vlm)
    ids = tokenizer()(list(INSTRUCTIONS))
    assert [policy.text.text(row) for row in ids] == list(INSTRUCTIONS)
    tokens, mask = policy.text(ids)
    smolvlm = policy.encoder.smolvla.model.vlm_with_expert.processor.tokenizer
    for row, text in enumerate(INSTRUCTIONS):
        expected = smolvlm(text + "\n")["input_ids"]
        assert tokens[row, : len(expected)].tolist() == expected and mask[row].sum() == len(expected)
    assert len(policy.text.cache) == 3
    policy.text(ids.flip(0))
    assert len(policy.text.cache) == 3  # cached per distinct instruction


def test_bc_loss_is_smolvlas_loss_and_trains_the_expert(tiny_vlm):
    policy = smolvla(tiny_vlm)
    obs = observations(policy, 32, seed=3)
    target = torch.tanh((obs["policy"][:, :ACTION_DIM] - 3.0) / 2.0)[:, None].expand(-1, 4, -1) * 0.8
    optimizer = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=3e-3)
    torch.manual_seed(0)
    with torch.no_grad():
        first = float(policy.bc_loss(obs, target))
    for _ in range(60):
        loss = policy.bc_loss(obs, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert all(p.grad is None for name, p in policy.named_parameters() if ".vlm_with_expert.vlm." in name)
    torch.manual_seed(0)
    with torch.no_grad():
        assert float(policy.bc_loss(obs, target)) < 0.5 * first


def test_bad_inputs_are_refused_naming_the_field(tiny_vlm):
    policy = smolvla(tiny_vlm)
    obs = observations(policy, 2)
    with pytest.raises(ValueError, match=r"obs\.image: expected uint8"):
        policy.act({**obs, "image": obs["image"][:, :, :16]})
    with pytest.raises(ValueError, match=r"obs\.instruction"):
        policy.act({k: v for k, v in obs.items() if k != INSTRUCTION_KEY})
    from policyforge.config import ConfigError

    with pytest.raises(ConfigError, match="variant"):
        SmolVLAPolicyConfig(**settings(tiny_vlm, variant="shortcut"))


def test_one_ppo_iteration_on_the_instructed_arm(tmp_path, tiny_vlm):
    from rich.console import Console

    from policyforge.algos.runner import RunConfig, Runner
    from policyforge.config import from_dict

    policy = {"class": "smolvla", **settings(tiny_vlm), "chunk": {"n_obs_steps": 1, "horizon": 4, "act_steps": 2}}
    run = {
        "name": "smolvla",
        "out_dir": str(tmp_path),
        "sim": {"task": "arm-instructed", "num_envs": 2, "image": {"cameras": ["front"], "width": 32, "height": 32}},
        "algo": {"rollout_steps": 4, "epochs": 1, "minibatches": 1},
        "runner": {"total_env_steps": 16, "eval_envs": 1, "video": "none", "tensorboard": False},
        "policy": {**policy, "max_state_dim": 32, "max_action_dim": 32},
    }
    runner = Runner.start(from_dict(RunConfig, run), Console(quiet=True))
    try:
        before = {k: v.clone() for k, v in runner.algo.policy.state_dict().items()}
        summary = runner.train()
        after = runner.algo.policy.state_dict()
        changed = {k for k, v in after.items() if not torch.equal(v, before[k])}
        assert summary["iterations"] == 1
        assert any("action_out_proj" in k for k in changed) and any("noise_net" in k for k in changed)
        assert not any(".vlm_with_expert.vlm." in k for k in changed)  # the VLM stays frozen
    finally:
        runner.close()


def test_frozen_early_steps_do_not_depend_on_the_trainable_parameters(tiny_vlm):
    """DPPO's trainable_steps on SmolVLA: with the same noise, a perturbed policy draws the same chain through the
    frozen steps (prefix and expert from the frozen copy) and a different one after them."""
    policy = smolvla(tiny_vlm, frozen_steps=2).eval()
    obs = observations(policy)

    before, after = chains_before_and_after_a_step(policy, obs)  # [B, K + 1, H, A] each
    assert torch.equal(after[:, :3], before[:, :3]) and (after[:, 3:] - before[:, 3:]).abs().mean() > 1e-3


def test_a_saved_checkpoint_loads_with_one_config_line(tiny_vlm, tmp_path):
    """`pretrained: <dir or hub id>` loads a SmolVLA checkpoint (here one saved by lerobot's save_pretrained)."""
    original = smolvla(tiny_vlm, normalize_state=False).eval()
    original.encoder.smolvla.save_pretrained(tmp_path / "checkpoint")
    torch.manual_seed(7)  # other random weights, unless the checkpoint's are loaded
    config = SmolVLAPolicyConfig(**settings(tiny_vlm, normalize_state=False, pretrained=str(tmp_path / "checkpoint")))
    loaded = SmolVLAFlowPolicy(OBS_DIM, ACTION_DIM, config, IMAGE_SHAPE).eval()
    obs = observations(original)
    torch.testing.assert_close(loaded.act(obs), original.act(obs), rtol=0, atol=1e-6)


def test_export_is_refused_naming_why(tiny_vlm, tmp_path):
    """A traced graph would keep the example's instruction as a constant: exporting says so instead."""
    from policyforge.policies.export import export

    policy = smolvla(tiny_vlm).eval()
    with pytest.raises(ValueError, match="export: a smolvla policy re-tokenizes the instruction"):
        export(policy, tmp_path / "policy.pt", "torchscript")
    assert not (tmp_path / "policy.pt").exists()
