"""Environment throughput: policyforge's native VecEnv vs raw batched MuJoCo vs a gymnasium SyncVectorEnv.

For each task and batch size, side by side in one process, interleaved over several rounds:
  ours  the policyforge VecEnv (full task logic: control, reward, termination, observations, auto-reset,
        torch tensors out);
  raw   `mujoco.batch.Batch` stepping the same MJCF with constant controls and no task code (the physical
        limit of this machine);
  gym   a gymnasium `SyncVectorEnv` of a plain `gymnasium.Env` over one MjData that runs the same task
        functions (what a user would otherwise write).
Throughput is in environment (control) steps per second. The last line is JSON for quadruped-walk at N=256.

    policyforge bench env-throughput [--tasks quadruped-walk arm-push-cube] [--num-envs 64 256]
"""

from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import mujoco
import mujoco.batch
import numpy as np
import torch

from policyforge.sims import SimConfig, make_env, make_task
from policyforge.sims.config import RandomizationConfig
from policyforge.sims.randomization import Randomizer
from policyforge.sims.task import NumpySampler, Task, TaskState


class PlainTaskEnv(gym.Env):
    """One environment of a policyforge task on a single MjData: the hand-written gymnasium baseline."""

    def __init__(self, task_name: str):
        self.task: Task = make_task(task_name)
        self.model = self.task.model
        self.data = mujoco.MjData(self.model)
        self.rng = np.random.default_rng(0)
        obs_dim = None
        self.action_space = gym.spaces.Box(-1.0, 1.0, (self.task.action_dim,), np.float64)
        self._defaults = Randomizer(RandomizationConfig(), self.model, None, task_name).sample(
            NumpySampler(self.rng), 1, np
        )
        obs_dim = self.reset(seed=0)[0].shape
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, obs_dim, np.float32)

    def _state(self) -> TaskState:
        phys = {name: getattr(self.data, name)[None] for name in self.task.physics_fields}
        return TaskState(phys, self.vars)

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        initial = self.task.reset(NumpySampler(self.rng), 1, np)
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[:], self.data.qvel[:], self.data.ctrl[:] = initial.qpos[0], initial.qvel[0], initial.ctrl[0]
        if initial.mocap_pos is not None:
            self.data.mocap_pos[:] = initial.mocap_pos[0]
        self.vars = {**initial.vars, **self._defaults}
        mujoco.mj_forward(self.model, self.data)
        self.steps = 0
        return self.task.observe(self._state(), np)["policy"][0].astype(np.float32), {}

    def step(self, action):
        action = np.clip(np.asarray(action, dtype=np.float64)[None], -1.0, 1.0)
        self.data.ctrl[:] = self.task.control(action, self._state(), np)[0]
        # the same engine work as the batch's step(stage=VEL): positions and velocities are current after
        # the last substep and are reused by the first substep of the next control step
        mujoco.mj_step2(self.model, self.data)
        for _ in range(self.task.control_decimation - 1):
            mujoco.mj_step(self.model, self.data)
        mujoco.mj_step1(self.model, self.data)
        self.steps += 1
        self.vars = self.task.update_vars(self._state(), action, np)
        state = self._state()
        reward, _ = self.task.reward(state, action, np)
        terminated = bool(self.task.terminated(state, np)[0])
        truncated = self.steps >= self.task.episode_steps and not terminated
        obs = self.task.observe(state, np)["policy"][0].astype(np.float32)
        return obs, float(reward[0]), terminated, truncated, {}


def time_ours(env, steps: int) -> float:
    action = torch.zeros(env.num_envs, env.action_dim)
    start = time.perf_counter()
    for _ in range(steps):
        env.step(action)
    return env.num_envs * steps / (time.perf_counter() - start)


def time_raw(batch: mujoco.batch.Batch, decimation: int, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        batch.step(nstep=decimation, stage=mujoco.mjtStage.mjSTAGE_VEL)
    return batch.nsim * steps / (time.perf_counter() - start)


def time_gym(vec: gym.vector.SyncVectorEnv, steps: int) -> float:
    action = np.zeros(vec.action_space.shape)
    start = time.perf_counter()
    for _ in range(steps):
        vec.step(action)
    return vec.num_envs * steps / (time.perf_counter() - start)


def measure(task: str, num_envs: int, rounds: int, seconds: float) -> dict:
    ours = make_env(SimConfig(task=task, num_envs=num_envs))
    model = ours.task.model
    raw = mujoco.batch.Batch(model, num_envs, 0, persistent=True)
    raw.reset(keyframe=0)
    plain = gym.vector.SyncVectorEnv([lambda: PlainTaskEnv(task) for _ in range(num_envs)])
    plain.reset(seed=0)
    decimation = ours.task.control_decimation
    # size each timed run to about `seconds` from a short warm-up
    steps = {
        "ours": max(5, int(seconds * time_ours(ours, 5) / num_envs)),
        "raw": max(5, int(seconds * time_raw(raw, decimation, 5) / num_envs)),
        "gym": max(2, int(seconds * time_gym(plain, 2) / num_envs)),
    }
    results: dict[str, list[float]] = {"ours": [], "raw": [], "gym": []}
    for _ in range(rounds):
        results["ours"].append(time_ours(ours, steps["ours"]))
        results["raw"].append(time_raw(raw, decimation, steps["raw"]))
        results["gym"].append(time_gym(plain, steps["gym"]))
    ours.close()
    plain.close()
    sps = {k: float(np.median(v)) for k, v in results.items()}
    return {
        "task": task,
        "n_envs": num_envs,
        "ours_sps": round(sps["ours"]),
        "raw_sps": round(sps["raw"]),
        "gym_sps": round(sps["gym"]),
        "ratio_vs_raw": round(sps["ours"] / sps["raw"], 3),
        "ratio_vs_gym": round(sps["ours"] / sps["gym"], 2),
        "physics_steps_per_env_step": decimation,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["quadruped-walk", "arm-push-cube"])
    parser.add_argument("--num-envs", nargs="+", type=int, default=[64, 256])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (median reported)")
    parser.add_argument("--seconds", type=float, default=1.0, help="length of each timed run")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [measure(t, n, args.rounds, args.seconds) for t in args.tasks for n in args.num_envs]
    print(f"{'task':16} {'N':>5} {'ours sps':>10} {'raw sps':>10} {'gym sps':>10} {'ours/raw':>9} {'ours/gym':>9}")
    for r in rows:
        print(
            f"{r['task']:16} {r['n_envs']:5d} {r['ours_sps']:10d} {r['raw_sps']:10d} {r['gym_sps']:10d} "
            f"{r['ratio_vs_raw']:9.3f} {r['ratio_vs_gym']:9.2f}"
        )
    headline = next(
        (r for r in rows if r["task"] == "quadruped-walk" and r["n_envs"] == 256),
        rows[-1],
    )
    print(json.dumps(headline))


if __name__ == "__main__":
    main()
