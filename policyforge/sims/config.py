"""Typed configuration of a simulation: task, backend, batch size, randomisation, corruption, image observations."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import torch

from policyforge.config import ConfigError, check, check_bounds, check_in, from_dict
from policyforge.rewards.config import RewardModelConfig

MAX_ENVS = 65_536
"""Most environments in one batch (sim.num_envs, runner.eval_envs): 16× the largest batch the benchmarks run (4096 MJX
envs, policyforge/bench/mjx_scaling.py); more is a typo that exhausts memory."""
MAX_THREADS = 1024
"""Most threads of the simulator or of torch; more than any machine has cores."""
MAX_IMAGE_SIZE = 1024
"""Largest image side, pixels: policies here read 64-128 px images; every env renders one per camera and step."""
FRICTION_SCALES = "(0, 5]"
"""Allowed friction scales: MuJoCo's coefficients are ~1 and real contact pairs range 0.1-1.5, so 5× is beyond any
real surface; at 0 nothing can push or walk."""
MASS_SCALES = "[0.1, 10]"
"""Allowed mass scales: a robot of a tenth or ten times its modelled mass is another robot, and the PD gains and
torque limits tuned for it no longer hold it (mass → 0 also makes the dynamics singular)."""
GAIN_SCALES = "[0.1, 10]"
"""Allowed PD gain (kp, kd) scales: a servo at a tenth of its stiffness cannot hold the robot up, and one at ten times
it is other hardware, not a randomised copy (stiffer loops also need smaller physics steps than the tasks' 5 ms)."""
COM_OFFSETS = "[0, 0.2]"
"""Allowed centre-of-mass shifts, m: 0.2 m already moves the quadruped's centre of mass to the end of its trunk
(real payload offsets are a few cm)."""


@dataclasses.dataclass
class RandomizationConfig:
    """Per-environment physical parameters, sampled uniformly from these ranges (None: not randomised)."""

    friction: tuple[float, float] | None = None
    """Scale of every geom's sliding friction, [low, high]."""
    mass_scale: tuple[float, float] | None = None
    """Scale of every body's mass and rotational inertia, [low, high]."""
    com_offset: float | None = None
    """Largest shift (m) of the task's root body's centre of mass along each axis."""
    kp_scale: tuple[float, float] | None = None
    """Scale of the PD position actuators' stiffness kp, [low, high]."""
    kd_scale: tuple[float, float] | None = None
    """Scale of the PD position actuators' damping kd, [low, high]."""
    resample_on_reset: bool = True
    """Draw new parameters for an environment whenever it resets (else once, at `reset(seed)`)."""
    push_interval_s: float | None = None
    """Interval event: every this many seconds of an episode the robot's free-floating root is pushed (None: never)."""
    push_velocity: float = 0.5
    """Largest change of the root's horizontal velocity a push makes, per axis (uniform in [-v, v]), m/s."""
    motor_strength: tuple[float, float] | None = None
    """Scale of the torque every motor can give (its forcerange, and with `sim.actuator.model: dc_motor` its stall
    torque), [low, high]: a weak or a strong motor."""
    command_delay_steps: tuple[int, int] | None = None
    """Command delay in physics steps, drawn per env in [low, high]: the first k physics steps of each control step
    still hold the previous command (less than the control decimation; `sims/actuators.py`)."""
    terrain_roughness: float | None = None
    """Rough ground: the top of every terrain tile (quadruped-walk's `terrain_tiles`) raised per env by a height
    uniform in [0, this], m — steps of up to this size between neighbouring tiles."""

    def __post_init__(self) -> None:
        check_in(self.terrain_roughness, "terrain_roughness", "[0, 0.2]", "a Go2 steps onto 0.1 m at most", " m")
        check_in(self.push_interval_s, "push_interval_s", "(0, 3600]", unit=" s")
        check_in(self.push_velocity, "push_velocity", "[0, 5]", "a push beyond 5 m/s throws a robot", " m/s")
        check_bounds(self.friction, "friction", FRICTION_SCALES)
        check_bounds(self.mass_scale, "mass_scale", MASS_SCALES)
        check_bounds(self.kp_scale, "kp_scale", GAIN_SCALES)
        check_bounds(self.kd_scale, "kd_scale", GAIN_SCALES)
        check_in(self.com_offset, "com_offset", COM_OFFSETS, unit=" m")
        check_bounds(self.motor_strength, "motor_strength", "(0, 2]")
        check_bounds(self.command_delay_steps, "command_delay_steps", "[0, 1000]")
        if self.command_delay_steps is not None:
            check(
                all(float(k).is_integer() for k in self.command_delay_steps),
                "command_delay_steps",
                "must be whole physics steps",
            )

    @property
    def enabled(self) -> bool:
        fields = ("friction", "mass_scale", "com_offset", "kp_scale", "kd_scale", "push_interval_s", "motor_strength")
        fields += ("command_delay_steps",)
        return any(getattr(self, name) is not None for name in fields)


MAX_LATENCY_STEPS = 50
"""Longest observation or action latency, control steps (a second at the tasks' 50 Hz: longer is a broken link)."""


@dataclasses.dataclass
class CorruptionConfig:
    """What a real robot's sensors and links do to the policy's observation and action, drawn per env per episode
    (`sims.corruption.Corruption`); the critic's observation stays clean. Terms are the task's
    `observation_terms()` (quadruped-walk: gyro, projected_gravity, command, joint_pos, joint_vel, last_action)
    or `all` (the whole policy observation)."""

    noise: dict[str, float] = dataclasses.field(default_factory=dict)
    """Gaussian noise std per term, fresh each step, in the units the policy sees (the names in
    `observation_names()` carry the task's scaling, e.g. `FR_hip.vel*0.05`)."""
    bias: dict[str, float] = dataclasses.field(default_factory=dict)
    """Largest constant offset per term: each feature's offset is drawn uniformly in [-b, b] per env per episode
    (a miscalibrated encoder, an IMU's bias)."""
    obs_latency_steps: tuple[int, int] = (0, 0)
    """The policy sees the observation of k control steps ago, k drawn in [low, high] per env per episode."""
    obs_drop_prob: float = 0.0
    """Probability that a step's observation does not arrive: the previous one is seen again."""
    action_latency_steps: tuple[int, int] = (0, 0)
    """The simulator applies the action chosen k control steps ago, k drawn in [low, high] per env per episode
    (action 0 before the episode's first k actions)."""

    def __post_init__(self) -> None:
        for field in ("noise", "bias"):
            for term, value in getattr(self, field).items():
                check_in(value, f"{field}.{term}", "[0, inf)")
        interval = f"[0, {MAX_LATENCY_STEPS}]"
        check_bounds(self.obs_latency_steps, "obs_latency_steps", interval)
        check_bounds(self.action_latency_steps, "action_latency_steps", interval)
        for field in ("obs_latency_steps", "action_latency_steps"):
            check(all(float(k).is_integer() for k in getattr(self, field)), field, "must be whole control steps")
        check_in(self.obs_drop_prob, "obs_drop_prob", "[0, 1)")

    @property
    def enabled(self) -> bool:
        latency = max(self.obs_latency_steps) + max(self.action_latency_steps)
        return bool(self.noise or self.bias or self.obs_drop_prob or latency)


@dataclasses.dataclass
class ActuatorConfig:
    """The motors' model (`sim.actuator`)."""

    model: Literal["pd", "dc_motor", "network"] = "pd"
    """`pd`: torque within the model's forcerange; `dc_motor`: within the torque–speed curve too; `network`: the
    torque an actuator network fitted to a drive's log gives (sims/actuators.py, sims/actuator_net.py)."""
    saturation_torque: list[float] | None = None
    """`dc_motor`: stall torque τ_s per actuator, N·m (one value: every actuator); None: the task's datasheet values
    (`Task.motor_curve`)."""
    no_load_speed: list[float] | None = None
    """`dc_motor`: ω₀ per actuator, rad/s, where the motor gives no more torque along its motion (one value: every
    actuator); None: the task's datasheet values."""
    network: str | None = None
    """`network`: the fitted network's file (.npz, written by `policyforge sysid actuator-net`)."""

    def __post_init__(self) -> None:
        check(self.model in ("pd", "dc_motor", "network"), "model", f"give pd, dc_motor or network, got {self.model!r}")
        check(
            (self.network is not None) == (self.model == "network"),
            "network",
            "give the fitted network's file with model: network, and only then",
        )
        for field in ("saturation_torque", "no_load_speed"):
            for value in getattr(self, field) or []:
                check_in(value, field, "(0, inf)")


RENDER_MODES = ("every_step", "on_request")
"""When image observations are rendered (`ImageConfig.render`)."""


@dataclasses.dataclass
class ImageConfig:
    """Camera images added to observations as `obs["image"]`, [N, V, H, W, 3] uint8."""

    cameras: list[str] = dataclasses.field(default_factory=list)
    """Cameras rendered each step, in order (V = len(cameras)); empty: no image observations."""
    width: int = 64
    """Image width, pixels."""
    height: int = 64
    """Image height, pixels."""
    quality: Literal["fast", "full"] = "fast"
    """`fast`: no shadows, reflections or multisampling, every env's frames drawn as tiles of one buffer (~5×
    cheaper on a CPU renderer: `policyforge bench image-throughput`); `full`: a frame per call as videos are drawn
    (shadows), for when the policy should see them."""
    render: Literal["every_step", "on_request"] = "every_step"
    """`every_step`: every observation carries `image`; `on_request`: none does, and a reader renders the envs it
    needs with `env.images(env_ids)` (a distillation teacher, at its own decisions only: several times cheaper when
    it plans a chunk of actions at a time)."""

    def __post_init__(self) -> None:
        check_in(self.width, "width", f"[1, {MAX_IMAGE_SIZE}]", unit=" px")
        check_in(self.height, "height", f"[1, {MAX_IMAGE_SIZE}]", unit=" px")
        check(self.quality in ("fast", "full"), "quality", f"give fast or full, got {self.quality!r}")
        check(self.render in RENDER_MODES, "render", f"give every_step or on_request, got {self.render!r}")


MAX_ACTION_CHUNK = 64
"""Most actions a chunk executes open-loop (Q-chunking uses 5; 64 control steps is seconds blind)."""


@dataclasses.dataclass
class SteerConfig:
    """Act through the starting noise of a frozen generative policy (DSRL, `algos.steering`): the env's action
    becomes that policy's noise, one step one of its decisions. Off while `base` is empty."""

    base: str = ""
    """A training run of a diffusion, flow or VLA policy on this task (e.g. a BC run) whose policy is steered and
    never changed; empty: the env's own actions."""
    checkpoint: str = "best"
    """Which of the base run's checkpoints: best, latest, or N env steps (`policyforge eval --checkpoint`)."""
    noise_bound: float = 0.0
    """An action of ±1 is noise of ±noise_bound; 0: the base's own bound (`Policy.noise_bound`, 3 std of the
    prior). DSRL steers within about 1–2.5."""

    def __post_init__(self) -> None:
        check_in(self.noise_bound, "noise_bound", "[0, 10]", "0: the base's own; beyond 10 std the base never learnt")

    @property
    def enabled(self) -> bool:
        return bool(self.base)


@dataclasses.dataclass
class SimConfig:
    """Which task to simulate, where, and how many copies."""

    task: str = "pendulum-swingup"
    """A policyforge task (`policyforge envs` lists them) or `gym:<id>` for any installed gymnasium env."""
    backend: Literal["mujoco", "mjx"] = "mujoco"
    """Simulator for policyforge tasks: `mujoco` (native C MuJoCo, threaded) or `mjx` (JAX: jit + vmap on
    the default JAX device, GPU if one is installed). `gym:` tasks ignore it."""
    num_envs: int = 64
    """N, environments stepped together."""
    num_threads: int = 0
    """Simulation threads of the `mujoco` backend (0: one per CPU core)."""
    device: str = "cpu"
    """Torch device of observations and rewards."""
    task_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Options of the task's own config class (e.g. control_mode, reward_type); checked when the env is made."""
    randomization: RandomizationConfig = dataclasses.field(default_factory=RandomizationConfig)
    """Domain randomisation of physical parameters."""
    image: ImageConfig = dataclasses.field(default_factory=ImageConfig)
    """Image observations."""
    reward_model: RewardModelConfig = dataclasses.field(default_factory=RewardModelConfig)
    """A reward model reading the cameras and the instruction as the env's reward (`rewards.wrapper`); off unless
    its path is set."""
    corruption: CorruptionConfig = dataclasses.field(default_factory=CorruptionConfig)
    """Observation noise, bias, latency and dropped frames, and action latency (sim-to-real); off by default."""
    actuator: ActuatorConfig = dataclasses.field(default_factory=ActuatorConfig)
    """The motors' model: ideal PD (default) or a DC motor's torque–speed curve (sim-to-real)."""
    steer: SteerConfig = dataclasses.field(default_factory=SteerConfig)
    """Steer a frozen generative policy through its starting noise (DSRL): the env's actions become its noise;
    off unless `steer.base` is set."""
    action_chunk: int = 0
    """Act in chunks of this many actions, executed open-loop as one decision (Q-chunking: SAC's actor and
    critics over whole chunks, `sims.decisions.ActionChunkEnv`); 0: single actions."""

    def __post_init__(self) -> None:
        check_in(self.action_chunk, "action_chunk", f"[0, {MAX_ACTION_CHUNK}]", "0: single actions")
        check(not (self.action_chunk and self.steer.enabled), "action_chunk",
              "a steered env already acts in its base's chunks: set action_chunk 0 with steer.base")  # fmt: skip
        check_in(self.num_envs, "num_envs", f"[1, {MAX_ENVS}]")
        check_in(self.num_threads, "num_threads", f"[0, {MAX_THREADS}]", "0: one per CPU core")
        try:
            torch.device(self.device)
        except RuntimeError:
            raise ConfigError("device", f"not a torch device: {self.device!r}; e.g. cpu, cuda, cuda:1") from None
        if not self.task.startswith("gym:"):
            from policyforge.sims.tasks import TASKS  # imported here: the tasks import this module's package

            if self.task in TASKS:  # an unknown name is refused by make_task, with the list of tasks
                from_dict(TASKS[self.task].config_class, self.task_options, "task_options")
