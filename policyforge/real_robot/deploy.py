"""Deploying a trained policy: the export a run or file names (`resolve_policy`, exported again when stale), run
one observation at a time, and the task adapters that build observations and commands with the simulator's own
code (`arm_adapter.ArmAdapter` for arms); `launch.deploy()` puts them on a robot behind `policyforge deploy`."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from pathlib import Path

import mujoco
import numpy as np

from policyforge.errors import UserError
from policyforge.policies.export import export_run, file_sha256, load_exported, run_checkpoint, stale_reason
from policyforge.policies.export_description import DescriptionError, description_file, load_description
from policyforge.real_robot.robot import Command, RobotState
from policyforge.sims.task import asset_path
from policyforge.sims.tasks.quadruped import JOINT_NAMES, STAND_QPOS, QuadrupedConfig, joint_targets, policy_observation


class DeployError(UserError):
    """A policy that cannot run on this robot (observation or action sizes, task); the message names the file."""


class NonFiniteObservation(ValueError):
    """An observation with NaN/inf entries was given to a policy (which would turn it into a plausible action)."""


class ExportedPolicy:
    """An exported policy (ONNX or TorchScript, see `policyforge export`) as obs [D] → action [A], driven as its
    description says (`policies.export_description`), like the simulator's `ChunkedActor`: it keeps the last
    n_obs_steps observations, oldest first, the first of an episode repeated, and executes act_steps actions of
    each chunk; a per-step residual runs its base's exported chunks and corrects each action. A non-finite
    observation raises `NonFiniteObservation` (the normaliser inside would clamp it into a finite, plausible
    action); an observation of another size raises ValueError naming the expected shape, as does a graph
    answering with another action size."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.spec = read_description(self.path)
        if self.spec.get("image_shape"):
            raise DeployError(f"{self.path} takes camera images; deploying image policies is not supported yet")
        try:
            self.run = load_exported(self.path)
        except Exception as err:  # onnxruntime and torch.jit raise their own types for a file they cannot parse
            raise DeployError(f"{self.path} cannot be loaded as an exported policy: {_one_line(err)}") from None
        self.action_dim = int(self.spec["action_dim"])
        self.history_len = int(self.spec.get("n_obs_steps") or 0)
        self.act_steps = int(self.spec.get("act_steps") or self.spec.get("chunk_len", 1))
        self.base = ExportedPolicy(self.path.with_name(self.spec["base"])) if self.spec.get("base") else None
        self.reset()

    def reset(self) -> None:
        if self.base is not None:
            self.base.reset()
        self.history: collections.deque[np.ndarray] = collections.deque(maxlen=max(self.history_len, 1))
        self.chunk: np.ndarray | None = None
        self.cursor = self.act_steps

    @property
    def obs_key(self) -> str:
        """The observation the graph reads: `policy`, or `critic` for a student of the privileged state."""
        return str(self.spec.get("observation", {}).get("obs", {}).get("observation_key", "policy"))

    @property
    def obs_dim(self) -> int:
        """Size D of the observations the description says the graph takes."""
        return int(self.spec.get("inputs", {}).get("obs", [self.spec.get("obs_dim", -1)])[-1])

    def check_sizes(self, obs_dim: int, action_dim: int, robot: str) -> None:
        """Raise DeployError unless this policy takes observations [obs_dim] and answers actions [action_dim]
        (what `robot`'s task adapter builds and applies): by its description, then by running the graph once on
        a zero observation (a description that does not match its graph is caught too)."""
        where = f"{self.path} (task {self.spec.get('task')!r})"
        if self.obs_dim != obs_dim:
            raise DeployError(
                f"{where} takes observations of size {self.obs_dim}, but the {robot} adapter builds observations of "
                f"size {obs_dim}: the policy was trained with other task options or observations; deploy a policy "
                f"trained on this task (its run's config.yaml sets sim.task and sim.task_options)"
            )
        if self.action_dim != action_dim:
            raise DeployError(
                f"{where} answers actions of size {self.action_dim}, but the {robot} adapter applies actions of "
                f"size {action_dim}: deploy a policy trained on this robot's task"
            )
        try:
            action = self(np.zeros(obs_dim, dtype=np.float32))
        except Exception as err:
            raise DeployError(
                f"{where} fails on an observation of size {obs_dim} although its description "
                f"({description_file(self.path).name}) says it takes that size: {_one_line(err)}; export it again"
            ) from None
        finally:
            self.reset()
        if not np.all(np.isfinite(action)):
            raise DeployError(f"{where} answers a zero observation with non-finite actions (NaN/inf weights?)")

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs, dtype=np.float32)
        if not np.all(np.isfinite(obs)):
            bad = np.flatnonzero(~np.isfinite(obs))
            raise NonFiniteObservation(f"observation entries {bad[:8].tolist()} are not finite: {obs[bad[:8]]}")
        if not self.history:
            self.history.extend([obs] * self.history.maxlen)  # a new episode: the first frame fills the history
        else:
            self.history.append(obs)
        if self.cursor >= self.act_steps:
            batch = np.stack(self.history)[None] if self.history_len else obs[None]
            inputs = (batch,) if self.base is None else (batch, self.base(obs)[None])
            chunk = np.asarray(self.run(*inputs))
            if chunk.ndim != 3 or chunk.shape[-1] != self.action_dim:
                raise ValueError(f"{self.path} answered actions of shape {chunk.shape}, not [1, H, {self.action_dim}]")
            self.chunk, self.cursor = chunk[0], 0
        action = self.chunk[self.cursor]
        self.cursor += 1
        return action


def resolve_policy(source: Path, say: Callable[[str], None] = print) -> Path:
    """The exported policy file of `source`: the file itself, or a run's export/policy.onnx, exported again (in this
    process, checked: `policies.export.export_run`) when it is missing or not the export of the run's current
    checkpoint (`policies.export.stale_reason`). `say` is told which export runs, and why a run was exported
    again."""
    source = Path(source)
    if source.is_file():
        _describe_export(source, say)
        return source
    if not (source / "config.yaml").is_file():
        what = "does not exist" if not source.exists() else "is neither an exported policy (.onnx/.pt) nor a run"
        raise FileNotFoundError(
            f"{source} {what}: deploy a training run's directory (`policyforge demo` makes runs/demo, `policyforge "
            "train RECIPE` runs/<name>) or an exported .onnx/.pt file"
        )
    exported, checkpoint = source / "export" / "policy.onnx", run_checkpoint(source)
    if not checkpoint.is_file():
        raise DeployError(f"{source} has no checkpoint ({checkpoint} is missing): was the run started?")
    reason = stale_reason(exported, checkpoint, source) if exported.is_file() else "no export yet"
    if reason is not None:
        say(f"exporting {source} to {exported} ({reason})")
        try:
            export_run(source, "onnx", exported)
        except (UserError, FileNotFoundError) as err:  # its message (a NaN policy, an unusable checkpoint) says why
            raise DeployError(f"exporting {source} failed, nothing was deployed:\n{err}") from None
        reason = stale_reason(exported, checkpoint, source)
        if reason is not None:
            raise DeployError(f"{exported} is still not the export of {checkpoint} after exporting it: {reason}")
    _describe_export(exported, say)
    return exported


def _describe_export(path: Path, say: Callable[[str], None]) -> None:
    """Say which export runs and what it was made from; warn when it is older than its run's checkpoint."""
    spec = read_description(path)
    source = spec.get("source") if isinstance(spec.get("source"), dict) else None
    made_from = f"{source['checkpoint']}, sha256 {str(source['sha256'])[:12]}…" if source else "checkpoint unknown"
    say(f"policy: {path} (exported from {made_from})")
    run_dir = path.resolve().parent.parent
    if (run_dir / "config.yaml").is_file() and run_checkpoint(run_dir).is_file():
        reason = stale_reason(path, run_checkpoint(run_dir), run_dir)
        if reason is not None:
            say(
                f"warning: {path} is not the export of {run_dir}'s current checkpoint: {reason}; "
                f"deploy {run_dir} to export it again"
            )


def read_description(path: Path) -> dict:
    """The JSON description `policyforge export` writes beside `path` (`<file name>.json`; an older export's
    `<stem>.json` when it describes this file's format: `policies.export_description.load_description`),
    checked: it parses, names the sizes the graph takes and answers, and (when it records one) the graph's
    sha256 matches the file, so a graph replaced or damaged after export is refused before anything runs it.
    DeployError naming the file otherwise."""
    try:
        spec = load_description(path)
    except DescriptionError as err:
        raise DeployError(str(err)) from None
    description = description_file(path)
    fix = "export it again with `policyforge export RUN` (it writes both files)"
    if not isinstance(spec.get("action_dim"), int):
        raise DeployError(f"{description} does not record the policy's action_dim: {fix}")
    if not path.is_file():
        raise DeployError(f"{path} is missing: {fix}")
    recorded = spec.get("graph_sha256")
    if recorded is not None and file_sha256(path) != recorded:
        raise DeployError(f"{path} is not the graph {description.name} was written for (sha256 differs): {fix}")
    return spec


@dataclasses.dataclass
class QuadrupedAdapter:
    """`quadruped-walk` on a Go2: the task's observation and PD-target code, the simulator's actuator gains."""

    task: QuadrupedConfig
    """The trained run's task options (action scale)."""
    velocity_command: tuple[float, float, float] = (0.5, 0.0, 0.0)
    """Commanded forward, sideways (m/s) and turn (rad/s) velocity."""

    def __post_init__(self) -> None:
        model = mujoco.MjModel.from_xml_path(str(asset_path("go2.xml")))
        self.kp = model.actuator_gainprm[:12, 0].copy()
        self.kd = -model.actuator_biasprm[:12, 2].copy()
        ranges = model.jnt_range[[model.joint(name).id for name in JOINT_NAMES]]
        self.low, self.high = ranges[:, 0].copy(), ranges[:, 1].copy()
        self.action_dim = 12
        self.default_pose = STAND_QPOS.copy()
        probe = RobotState(0.0, STAND_QPOS.copy(), np.zeros(12), imu_quat=np.array([1.0, 0, 0, 0]), gyro=np.zeros(3))
        self.obs_dim = len(self.observation(probe, np.zeros(12)))
        """Size D of the observations it builds."""

    def observation(self, state: RobotState, last_action: np.ndarray) -> np.ndarray:
        rows = [state.gyro, state.imu_quat, np.asarray(self.velocity_command), state.joint_pos, state.joint_vel]
        return policy_observation(*(np.asarray(r, np.float64)[None] for r in rows), last_action[None], np)[0]

    def command(self, action: np.ndarray) -> Command:
        return self.pose_command(
            joint_targets(np.asarray(action)[None], self.low, self.high, self.task.action_scale, np)[0]
        )

    def pose_command(self, position: np.ndarray) -> Command:
        zeros = np.zeros(12)
        return Command(
            position=np.asarray(position, np.float64), velocity=zeros, torque=zeros.copy(), kp=self.kp, kd=self.kd
        )


def _one_line(err: BaseException, limit: int = 300) -> str:
    """An exception as one line: its type and its message's words (onnxruntime's span lines), cut at `limit`."""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:limit]}{'…' if len(text) > limit else ''}"
