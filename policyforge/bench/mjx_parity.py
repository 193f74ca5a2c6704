"""Native MuJoCo against MJX on every task: 100 control steps from identical states with identical actions.

Prints, per task, the largest joint-position, observation and reward differences after 1, 10, 50 and 100
steps (envs are compared until their first episode ends), whether terminated/truncated flags agreed, and the
precision MJX ran at (float32 by default; `JAX_ENABLE_X64=1` for float64). Last line: one JSON object.

    policyforge bench mjx-parity [--tasks ...] [--envs 8] [--steps 100]
"""

from __future__ import annotations

import argparse
import json

import jax.numpy as jnp

from policyforge.sims import RandomizationConfig, SimConfig, make_env
from policyforge.sims.parity import oscillating_actions, paired_rollout

AMPLITUDE = {"pendulum-swingup": 1.0, "quadruped-walk": 0.5}
"""Action amplitude per task; arms use 0.2, which keeps the hand in free space above the table."""
RANDOMIZATION = {
    "quadruped-walk": RandomizationConfig(
        friction=(0.5, 1.2), mass_scale=(0.85, 1.15), kp_scale=(0.8, 1.2), kd_scale=(0.8, 1.2)
    )
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    tasks = ["pendulum-swingup", "arm-reach", "arm-push-cube", "arm-lift-cube", "quadruped-walk"]
    parser.add_argument("--tasks", nargs="+", default=tasks)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    precision = str(jnp.zeros(()).dtype)
    print(f"MJX precision {precision}; {args.envs} envs; {args.steps} control steps")
    print(f"{'task':>17} {'step':>5} {'qpos err':>10} {'obs err':>10} {'reward err':>10}  flags equal")
    summary = {}
    for task in args.tasks:
        randomization = RANDOMIZATION.get(task)
        config = SimConfig(task=task, num_envs=args.envs, randomization=randomization or RandomizationConfig())
        native = make_env(config, seed=0)
        mjx = make_env(SimConfig(**{**config.__dict__, "backend": "mjx"}), seed=0)
        actions = oscillating_actions(args.steps, args.envs, native.action_dim, AMPLITUDE.get(task, 0.2))
        result = paired_rollout(native, mjx, actions, randomization)
        for step in sorted({1, 10, 50, args.steps} & set(range(1, args.steps + 1))):
            i = step - 1
            print(
                f"{task:>17} {step:5d} {result.qpos_error[i]:10.2e} {result.obs_error[i]:10.2e} "
                f"{result.reward_error[i]:10.2e}  {result.flags_equal}"
            )
        summary[task] = float(f"{result.qpos_error.max():.3g}")
    print(json.dumps({"precision": precision, "steps": args.steps, "max_qpos_error": summary}))


if __name__ == "__main__":
    main()
