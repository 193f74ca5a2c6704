"""A trained run's frozen policy as a teacher of another policy (`algo: distill`): loaded next to the student, fed
the same batched observations through its own keys (images and instruction for a VLA, privileged state for a
teacher on the critic observation), and queried at its own decision rate, its action chunks covering the student's
decisions until they run out."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from policyforge.config import ConfigError
from policyforge.policies.base import IMAGE_KEY, Obs, Policy
from policyforge.policies.rollout import ChunkedActor
from policyforge.sims.vec_env import VecEnv


def load_teacher(run_dir: str, which: str, env: VecEnv) -> Policy:
    """The policy of the run `run_dir` (checkpoint `which`: latest, best, N or a file), frozen, built for `env`:
    ConfigError on `algo.teacher` when the run is missing, acts in another action space or reads observations
    `env` does not give (naming the teacher's and the student's)."""
    from policyforge import config as config_io
    from policyforge.algos import checkpoint
    from policyforge.algos.build import build_policy
    from policyforge.algos.run_config import CONFIG_FILE, RunConfig
    from policyforge.sims import make_env

    path = Path(run_dir)
    if not (path / CONFIG_FILE).is_file():
        raise ConfigError("algo.teacher", f"{path} is not a policyforge run (no {CONFIG_FILE}); give a run directory")
    config = config_io.load(RunConfig, path / CONFIG_FILE)
    own_env = make_env(dataclasses.replace(config.sim, num_envs=1))
    own_shapes, own_actions = dict(own_env.obs_shapes), own_env.action_dim
    try:
        policy = build_policy(config, own_env)
    finally:
        own_env.close()
    if own_actions != env.action_dim:
        raise ConfigError(
            "algo.teacher",
            f"the teacher ({path}, task {config.sim.task}) acts in {own_actions} dimensions, the student in "
            f"{env.action_dim} (this run's sim.task): distil on a task with the teacher's action space",
        )
    policy.load_state_dict(checkpoint.load(checkpoint.resolve(path, which))["algo"]["policy"])
    for key in policy.obs_keys:
        if key not in own_shapes:
            continue  # an input the policy makes itself (a residual's base action)
        if key not in env.obs_shapes or tuple(env.obs_shapes[key]) != tuple(own_shapes[key]):
            given = tuple(env.obs_shapes[key]) if key in env.obs_shapes else "nothing"
            raise ConfigError(
                "algo.teacher",
                f"the teacher reads obs[{key!r}] of shape {tuple(own_shapes[key])} per env; this run's sim gives "
                f"{given}: give sim the teacher's observation settings (its sim.image section: cameras, image size)",
            )
    return policy.eval().requires_grad_(False)


class TeacherLabels:
    """A frozen teacher's actions for each of a student's decisions: [N, H_s, A], the teacher's next H_s actions.

    The teacher keeps its own per-env input state (history, cached instruction), sees every env step's
    observation, and plans again when it has executed its `act_steps` or when its chunk no longer covers the
    student's H_s actions; envs that start an episode plan afresh."""

    def __init__(self, teacher: Policy, student: Policy, env: VecEnv):
        if student.chunk_len > teacher.chunk_len:
            raise ConfigError(
                "policy.chunk",
                f"the student plans {student.chunk_len} actions per decision and the teacher only "
                f"{teacher.chunk_len}: give the student a chunk of at most {teacher.chunk_len}",
            )
        self.teacher, self.horizon, self.env = teacher, student.chunk_len, env
        self.actor = ChunkedActor(teacher, env.num_envs)
        """The teacher's history, current chunk [N, H_t, A] and each env's cursor in it (evaluation's bookkeeping)."""
        self.rendered = 0
        """Env frames rendered for the teacher (`sim.image.render: on_request`), all decisions so far."""

    @torch.no_grad()
    def decide(self, obs: Obs) -> torch.Tensor:
        """This env step's observations [N, ...] (a student decision) → the teacher's next H_s actions [N, H_s, A]."""
        actor = self.actor
        replan = (actor.cursor >= actor.act_steps) | (actor.cursor + self.horizon > self.teacher.chunk_len)
        ids = replan.nonzero()[:, 0]
        teacher_obs = actor.history.push(self._with_images(obs, ids))
        if len(ids):
            chunk = self.teacher.act({k: v[ids] for k, v in teacher_obs.items()})
            if actor.chunk is None:
                actor.chunk = torch.zeros(actor.num_envs, *chunk.shape[1:])
            actor.chunk[ids] = chunk
            actor.cursor[ids] = 0
        steps = actor.cursor[:, None] + torch.arange(self.horizon)
        return actor.chunk[torch.arange(actor.num_envs)[:, None], steps]

    def _with_images(self, obs: Obs, ids: torch.Tensor) -> Obs:
        """`obs` with the teacher's images where the env leaves them to be rendered on request: those of envs `ids`
        (the ones it plans for now), zeros elsewhere (a teacher with one frame of history never reads those)."""
        if IMAGE_KEY not in self.teacher.obs_keys or IMAGE_KEY in obs:
            return obs
        if self.teacher.n_obs_steps > 1:
            raise ConfigError(
                "sim.image.render",
                f"the teacher reads the last {self.teacher.n_obs_steps} frames, which are not rendered on request: "
                "give sim.image.render=every_step",
            )
        frames = torch.zeros((self.env.num_envs, *self.env.obs_shapes[IMAGE_KEY]), dtype=torch.uint8)
        if len(ids):
            frames[ids] = self.env.images(ids.numpy()).to(frames.device)
            self.rendered += len(ids)
        return {**obs, IMAGE_KEY: frames}

    def stepped(self, ended: torch.Tensor, next_obs: Obs | None) -> None:
        """One env step executed; `ended` [N] envs start a new episode; `next_obs`: the observations of a step
        inside the student's decision (None at the next decision, which `decide` pushes)."""
        self.actor.cursor += 1
        self.actor.episodes_ended(ended)
        if next_obs is not None:
            self.actor.history.push(self._with_images(next_obs, torch.zeros(0, dtype=torch.long)))

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.actor.state_dict()

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.actor.load_state_dict(state)
