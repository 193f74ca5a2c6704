"""Does the VLA's action expert clone the arm-instructed demonstrations when it is told the scene exactly? The
control for the VLA's behaviour cloning: the VLA (blank images, its instruction, and the privileged state
`observation.environment_state` in place of proprioception) and the plain flow policy (an MLP denoiser on that
state) learn from the same windows of a dataset with the same BC, then act in the task, fed the same state.

    python bench/vla_state_control.py --dataset DIR [--steps 1000] [--envs 64]

Policies: `flow` (the MLP denoiser on the state), `vla` (the VLA's attention expert), `vla_mlp` (the VLA's MLP
expert: the state through a linear readout, plus the pooled prefix). Prints, per policy, the flow loss and `act`'s
error on 512 training windows, and the success of a closed-loop evaluation (the first episode of each env, seeds as
a run's evaluation); the last line is JSON {policy: {...}}.
"""

from __future__ import annotations

import argparse
import json

import torch

from policyforge.algos.bc import BC, BCConfig, DemoWindows
from policyforge.algos.run_config import EVAL_SEED_OFFSET
from policyforge.data.dataset import Demonstrations
from policyforge.data.layout import ENV_STATE
from policyforge.policies.base import IMAGE_FEATURES_KEY, EnvSpec, Obs
from policyforge.policies.chunked import ChunkConfig
from policyforge.policies.flow import FlowConfig
from policyforge.policies.rollout import ChunkedActor
from policyforge.policies.vla import VLAConfig
from policyforge.sims import SimConfig, make_env
from policyforge.sims.instruction_obs import INSTRUCTION_KEY, INSTRUCTION_TOKENS

CHUNK = ChunkConfig(n_obs_steps=1, horizon=8, act_steps=4)
VIEWS = (2, 64, 64, 3)
"""The blank cameras the VLA is given (task and wrist at 64 × 64, as configs/vla-bc.yaml)."""


def train(kind: str, demos: Demonstrations, steps: int) -> tuple[BC, torch.Tensor | None]:
    """BC of `kind` (flow, vla, vla_mlp) on the dataset's privileged states; a VLA's blank image
    [1, 1, V, H, W, 3]."""
    state_dim = demos.column(ENV_STATE).shape[1]
    vla = kind.startswith("vla")
    windows = DemoWindows(demos, "policy", 1, CHUNK.horizon, [], instructions=vla)
    windows.states = torch.as_tensor(demos.column(ENV_STATE), dtype=torch.float32)
    blank = None
    if vla:
        shapes = {"policy": (state_dim,), "image": VIEWS, "instruction": (INSTRUCTION_TOKENS,)}
        expert = "mlp" if kind == "vla_mlp" else "attention"
        policy = VLAConfig(chunk=CHUNK, steps=10, expert=expert).build(EnvSpec(shapes, 5))
        blank = torch.zeros(1, 1, *VIEWS, dtype=torch.uint8)
        features = policy.frozen_image_features(blank)
        sample = windows.sample

        def with_blank_images(batch: int) -> tuple[Obs, torch.Tensor]:
            obs, actions = sample(batch)
            return {**obs, IMAGE_FEATURES_KEY: features.expand(batch, *features.shape[1:])}, actions

        windows.sample = with_blank_images  # type: ignore[method-assign]
    else:
        policy = FlowConfig(chunk=CHUNK, steps=10).build(EnvSpec({"policy": (state_dim,)}, 5))
    torch.manual_seed(0)
    config = BCConfig(dataset="-", gradient_steps=steps, steps_per_iteration=250, batch_size=64, lr=3e-4)
    config.warmup_steps = 100
    bc = BC(policy, windows, config)
    for _ in range(steps // 250):
        bc.iterate(None, None, None)  # type: ignore[arg-type]  (BC reads no env)
    return bc, blank


@torch.no_grad()
def closed_loop_success(bc: BC, blank: torch.Tensor | None, envs: int) -> float:
    env = make_env(SimConfig(task="arm-instructed", num_envs=envs), seed=EVAL_SEED_OFFSET)
    obs = env.reset(seed=EVAL_SEED_OFFSET)
    actor = ChunkedActor(bc.policy, envs)
    finished, success = torch.zeros(envs, dtype=torch.bool), torch.zeros(envs)
    while not finished.all():
        policy_obs = {"policy": obs["critic"]}
        if blank is not None:
            policy_obs.update({INSTRUCTION_KEY: obs[INSTRUCTION_KEY], "image": blank[0, 0].expand(envs, *VIEWS)})
        obs, _, _, _, info = env.step(actor(policy_obs))
        done = info["episode"]["done"]
        actor.episodes_ended(done)
        first = done & ~finished
        success[first] = info["episode"]["success"][first].float()
        finished |= done
    env.close()
    return float(success.mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--envs", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(1)
    demos = Demonstrations(args.dataset)
    results = {}
    for kind in ("flow", "vla", "vla_mlp"):
        bc, blank = train(kind, demos, args.steps)
        torch.manual_seed(1)
        obs, actions = bc.windows.sample(512)
        with torch.no_grad():
            act_mse = float((bc.policy.act(obs) - actions).pow(2).mean())
            torch.manual_seed(2)
            flow = float(bc.policy.flow_loss(bc.policy.encode(obs), actions))
        results[kind] = {"flow_loss": flow, "act_mse": act_mse, "success": closed_loop_success(bc, blank, args.envs)}
        print(f"{kind}: flow loss {flow:.3f}, act error {act_mse:.4f}, success {results[kind]['success']:.0%}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
