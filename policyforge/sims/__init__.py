"""Simulation: the batched VecEnv contract, backends (native MuJoCo, gymnasium), tasks with their own MJCF
models, domain randomisation, offscreen rendering, and adapters to gymnasium and Stable-Baselines3."""

from policyforge.sims import render as _render  # noqa: F401  (selects headless OpenGL before mujoco loads)
from policyforge.sims import xla as _xla  # noqa: F401  (XLA CPU flags before JAX starts)
from policyforge.sims.config import ImageConfig, RandomizationConfig, SimConfig
from policyforge.sims.make import make_env, make_task
from policyforge.sims.task import Task, TaskConfig, TaskState
from policyforge.sims.tasks import TASKS
from policyforge.sims.vec_env import SimulationError, VecEnv

__all__ = [
    "TASKS",
    "ImageConfig",
    "RandomizationConfig",
    "SimConfig",
    "SimulationError",
    "Task",
    "TaskConfig",
    "TaskState",
    "VecEnv",
    "make_env",
    "make_task",
]
