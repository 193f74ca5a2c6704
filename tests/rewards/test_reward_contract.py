"""Every reward model against the contract (`rewards/base.py`): batched progress and success in [0, 1], the same
answer for the same input, each sample's answer independent of the batch around it, the instruction changing it,
and inputs that are not what the model declares refused naming the field. The CLIP reward is a tiny random CLIP of
the real architecture, loaded from a checkpoint directory by the same code that loads a downloaded one."""

from __future__ import annotations

import pytest
import torch

from policyforge.rewards import RewardModel
from policyforge.rewards.config import RewardModelConfig, VlmJudgeConfig
from policyforge.rewards.ensemble import RewardEnsemble
from policyforge.rewards.learned import LearnedReward, LearnedRewardConfig
from policyforge.rewards.load import load_reward_model
from policyforge.sims.config import ImageConfig

MODELS = {
    "learned": lambda: LearnedReward(
        LearnedRewardConfig(image_channels=8, image_features=16, hidden=32), ["task"], 24, 32
    ),
    "learned_window_2_views": lambda: LearnedReward(
        LearnedRewardConfig(window=3, frame_stride=2, image_channels=8, image_features=16, hidden=32),
        ["task", "wrist"], 16, 16,
    ),
    "learned_ensemble": lambda: RewardEnsemble(
        [LearnedReward(LearnedRewardConfig(image_channels=8, image_features=16, hidden=32), ["task"], 24, 32)
         for _ in range(3)], uncertainty_penalty=1.0,
    ),
}  # fmt: skip
INSTRUCTIONS = ["touch the red cube", "lift the blue cube", "push the green cube to the left zone", "go to the cube"]


CHECKPOINTS = {  # kind → (the tiny checkpoint's fixture, settings)
    "clip": ("tiny_clip", {}),
    "vlm": ("tiny_qwen", {}),
    "vlm_3_frames": ("tiny_qwen", {"vlm": VlmJudgeConfig(frames=3, frame_stride=2)}),
    "vlm_generate": ("tiny_qwen", {"vlm": VlmJudgeConfig(answer="generate", max_new_tokens=2)}),
}


@pytest.fixture(params=[*sorted(MODELS), *CHECKPOINTS])
def model(request) -> RewardModel:
    torch.manual_seed(0)
    if request.param in CHECKPOINTS:  # the real loading path, from a checkpoint directory of a tiny random model
        fixture, settings = CHECKPOINTS[request.param]
        path = str(request.getfixturevalue(fixture))
        kind = request.param.split("_")[0]
        config = RewardModelConfig(path=path, kind=kind, cameras=["task"], **settings)
        model = load_reward_model(config, ImageConfig(cameras=["front", "task"], width=40, height=24))
        if request.param == "vlm_generate":
            answer_in_digits(model)
        return model
    model = MODELS[request.param]()
    for parameter in model.parameters():  # off its initialisation (FiLM starts at the identity), as after training
        parameter.data.add_(0.05 * torch.randn_like(parameter))
    return model


def discrete(model: RewardModel) -> bool:
    """The model answers in 5 levels (a judge that generates its score)."""
    return getattr(getattr(model, "config", None), "answer", None) == "generate"


def answer_in_digits(judge) -> None:
    """Make a random judge answer with digits (as a trained one does): every other token's logit is 0, the digits'
    ±large, so greedy decoding picks the digit its hidden state favours."""
    head = judge.model.lm_head.weight.data
    digits = head[judge.digit_ids] * 1000
    head.zero_()
    head[judge.digit_ids] = digits


def frames_for(model: RewardModel, batch: int, seed: int = 0) -> torch.Tensor:
    inputs = model.inputs
    shape = (batch, inputs.window, len(inputs.cameras), inputs.height, inputs.width, 3)
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def test_scores_are_batched_probabilities(model):
    scores = model.score(frames_for(model, 4), INSTRUCTIONS)
    for values in (scores.progress, scores.success):
        assert values.shape == (4,) and values.dtype == torch.float32
        assert ((values >= 0) & (values <= 1)).all()
    if not discrete(model):
        assert not torch.equal(scores.progress, scores.progress[[1, 0, 2, 3]]), "samples differ"


def test_the_same_input_gets_the_same_answer_and_the_batch_does_not_matter(model):
    frames = frames_for(model, 4)
    model.train()  # scoring is in eval mode whatever the module's mode (no random shift), and restores it
    first, second = model.score(frames, INSTRUCTIONS), model.score(frames, INSTRUCTIONS)
    assert model.training
    assert torch.equal(first.progress, second.progress) and torch.equal(first.success, second.success)
    alone = model.score(frames[2:3], INSTRUCTIONS[2:3])
    torch.testing.assert_close(alone.progress, first.progress[2:3], rtol=0, atol=1e-5)
    torch.testing.assert_close(alone.success, first.success[2:3], rtol=0, atol=1e-5)


def test_the_instruction_changes_the_answer(model):
    if discrete(model):
        pytest.skip("a random judge's greedy answer is one digit whatever it is asked")
    frames = frames_for(model, 1).expand(2, *frames_for(model, 1).shape[1:])
    scores = model.score(frames, ["touch the red cube", "lift the blue cube"])
    assert abs(float(scores.progress[0] - scores.progress[1])) > 1e-4


def test_a_window_of_one_may_leave_out_the_time_axis():
    model = MODELS["learned"]()
    frames = frames_for(model, 2)
    torch.testing.assert_close(model.score(frames[:, 0], INSTRUCTIONS[:2]).progress,
                               model.score(frames, INSTRUCTIONS[:2]).progress)  # fmt: skip


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (lambda f, i: (f.float(), i), "frames", "expected uint8"),
        (lambda f, i: (f[:, :, :, :-1], i), "frames", r"cameras \['task'(, 'wrist')?\] at \d+ x \d+"),
        (lambda f, i: (f[:, :, [0, 0]] if f.shape[2] == 1 else f[:, :, :1], i), "frames", "expected uint8"),
        (lambda f, i: (f, i[:3]), "instructions", "expected 4"),
        (lambda f, i: (f, [*i[:3], " "]), "instructions", "sample 3 has no instruction"),
        (lambda f, i: (f, "touch the red cube"), "instructions", "a single string"),
    ],
)
def test_inputs_that_are_not_what_the_model_reads_are_refused_naming_the_field(model, change, field, message):
    frames, instructions = change(frames_for(model, 4), INSTRUCTIONS)
    with pytest.raises(ValueError, match=rf"^{field}: .*{message}"):
        model.score(frames, instructions)
