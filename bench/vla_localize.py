"""Can the VLA's prefix find the named cube? Localisation alone, without behaviour cloning: the VLA's prefix
(configs/vla-bc.yaml's vision: EfficientNet-lite0 stage 3, FiLM) and a linear head on its pooled tokens regress the
named cube's (x, y) from frames of an arm-instructed dataset's first episodes, and are tested on later episodes.

The held-out episodes' first frames are the test that matters: there the arm has not moved, so only the images and
the instruction can tell where the cube is (later frames give it away through the arm's own state). With --scenes N
half of every batch comes from N fresh simulated layouts instead (BC's `algo.scene_frames`, algos/scenes.py).

    python bench/vla_localize.py --dataset DIR [--train 80] [--test 20] [--steps 1000] [--stages 3] [--scenes N]

Prints the error every 250 steps (cm, and the mean guess's); the last line is JSON {"first_frames_cm",
"first_frames_guess_cm", "all_frames_cm", "all_frames_guess_cm", "train_loss"}.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from policyforge.algos.scenes import SceneFrames
from policyforge.bench.vla_probe import Windows
from policyforge.data.dataset import Demonstrations
from policyforge.data.layout import ENV_STATE
from policyforge.policies.base import IMAGE_FEATURES_KEY, EnvSpec
from policyforge.policies.chunked import ChunkConfig
from policyforge.policies.vla import VisionConfig, VLAConfig, VLAPolicy
from policyforge.policies.vla_networks import pooled
from policyforge.sims import SimConfig
from policyforge.sims.config import ImageConfig

NAMED_CUBE = slice(-12, -10)
"""(x, y) of the instructed cube in arm-instructed's critic observation (ArmInstructed.observe)."""
START_FRAMES = 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--train", type=int, default=80, help="episodes to learn from (the first ones)")
    parser.add_argument("--test", type=int, default=20, help="episodes after them to test on")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--stages", type=int, default=3, help="EfficientNet-lite0 stages (3: 8 × 8 tokens)")
    parser.add_argument("--scenes", type=int, default=0, help="fresh simulated layouts to learn from too")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    demos = Demonstrations(args.dataset)
    windows = Windows(demos, ["task", "wrist"], list(range(args.train + args.test)), horizon=1)
    starts, states, images, ids = windows.starts, windows.states, windows.images, windows.ids
    if windows.env_states is None:
        raise SystemExit(f"{args.dataset} has no {ENV_STATE}: record it with this version's `policyforge collect`")
    target = windows.env_states[:, NAMED_CUBE]
    config = VLAConfig(chunk=ChunkConfig(n_obs_steps=1, horizon=8, act_steps=4), privileged_aux_weight=1.0)
    config.vision = VisionConfig(efficientnet_stages=args.stages)
    shapes = {"policy": states.shape[1:], "image": images.shape[1:], "instruction": ids.shape[1:]}
    policy = config.build(EnvSpec({**shapes, "critic": windows.env_states.shape[1:]}, 5))
    policy.update_normalizer({"policy": states})
    features = policy.frozen_image_features(images)
    scenes = scene_frames(demos, images.shape[2:4], args.scenes, policy) if args.scenes else None
    head = torch.nn.Linear(config.width, 2)
    trained = [p for p in policy.encoder.parameters() if p.requires_grad] + list(head.parameters())
    optimizer = torch.optim.Adam(trained, lr=3e-4)
    train_frames = int(starts[args.train])
    mean, std = target[:train_frames].mean(0), target[:train_frames].std(0)
    first = torch.as_tensor(np.concatenate([starts[args.train :] + k for k in range(START_FRAMES)]))
    later = torch.arange(train_frames, len(target))

    def predict(index: torch.Tensor) -> torch.Tensor:
        obs = {"policy": states[index][:, None], IMAGE_FEATURES_KEY: features[index][:, None]}
        return head(pooled(policy.encode({**obs, "instruction": ids[index]})))

    def training_loss() -> torch.Tensor:
        index = torch.randint(train_frames, (32 if scenes else 64,))
        loss = (predict(index) - (target[index] - mean) / std).pow(2).mean()
        if scenes is None:
            return loss
        batch = scenes.sample(32)
        scene_target = (batch["critic"][:, NAMED_CUBE] - mean) / std
        return (loss + (head(pooled(policy.encode(batch))) - scene_target).pow(2).mean()) / 2

    @torch.no_grad()
    def error_cm(index: torch.Tensor) -> tuple[float, float]:
        predicted = torch.cat([predict(part) for part in index.split(256)]) * std + mean
        guess = (mean - target[index]).norm(dim=1).mean()
        return float((predicted - target[index]).norm(dim=1).mean() * 100), float(guess * 100)

    result: dict[str, float] = {}
    for step in range(1, args.steps + 1):
        policy.train()
        loss = training_loss()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 250 == 0 or step == args.steps:
            policy.eval()
            (first_cm, first_guess), (all_cm, all_guess) = error_cm(first), error_cm(later)
            result = {
                "first_frames_cm": first_cm,
                "first_frames_guess_cm": first_guess,
                "all_frames_cm": all_cm,
                "all_frames_guess_cm": all_guess,
                "train_loss": float(loss.detach()),
            }
            print(
                f"step {step}: training loss {result['train_loss']:.3f}; held-out first frames {first_cm:.1f} cm "
                f"(mean guess {first_guess:.1f}), all their frames {all_cm:.1f} cm (guess {all_guess:.1f})",
                flush=True,
            )
    print(json.dumps(result))


def scene_frames(demos: Demonstrations, size: tuple[int, int], count: int, policy: VLAPolicy) -> SceneFrames:
    """`count` fresh layouts of the dataset's task, rendered as its videos were (cameras and size)."""
    image = ImageConfig(cameras=["task", "wrist"], height=size[0], width=size[1])
    return SceneFrames(SimConfig(task=demos.info["policyforge"]["task"], image=image), count, policy, seed=0)


if __name__ == "__main__":
    main()
