"""The program side of the simulated UR controller whose RTDE interface `rtde_sim.py` serves: the dashboard
server (TCP 29999), the script port (TCP 30003), and the URScript program ur-rtde 1.6.5's `RTDEControlInterface`
uploads there, emulated every 2 ms as the e-Series controller runs it.

- Dashboard: a banner on connect, then one `\\n`-terminated line per command, as PolyScope 5.15 answers
  `PolyscopeVersion`, `get serial number`, `is in remote control`, `stop` and a few status queries.
- Script port: a program whose first line is `def rtde_control():` and that has ur-rtde's control loop starts
  (runtime_state STOPPED → PLAYING); anything else is ignored and counted, as a real controller would fail to
  compile it. Nothing is streamed back on this port.
- The program: each tick reads the command in input_int_register_0 and answers in output_int_register_0
  (1 ready, 2 done) like the script's main loop: servoJ (11) and speedJ (9) are real-time; moveJ (1),
  servoStop (16), speedStop (15) and stopJ (34) block the loop until the motion ends; stopScript (255) ends the
  program. Any other command, an asynchronous move or stop, a non-finite argument or a speed or acceleration
  ≤ 0 ends it with a runtime error (`script_error` in the facts).
- The arm: until the program first commands motion the joints follow `idle_trajectory(t)`; from then on
  `JointMotion` moves them within the UR5e's joint speed limit and `max_acceleration`.
- Every servoJ target that arrives is audited (`peers.audit.TargetAudit`). Facts go to `stats_path` (JSON,
  atomically, ten times a second and on close).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import re
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from policyforge.io import atomic_path
from policyforge.real_robot.peers.audit import TargetAudit
from policyforge.real_robot.peers.ur_motion import JointMotion, measured_window
from policyforge.real_robot.robot import Command
from policyforge.real_robot.ur import ur5e_spec

STOPPED, PLAYING = 1, 2
"""RTDE runtime_state values."""
REALTIME = {6, 9, 10, 11, 24, 25, 26, 27, 38, 58, 66, 67, 68, 69, 70, 71}
"""Commands the script's main loop processes every tick (it signals ready, not done)."""
MOTION = {1, 9, 11, 15, 16, 34}
"""The commands emulated (moveJ, speedJ, servoJ, speedStop, servoStop, stopJ); the first ends the idle trajectory."""
POLYSCOPE = "URSoftware 5.15.0.0 (Aug 2023)"
"""The dashboard's PolyscopeVersion answer, matching the RTDE controller version 5.15.0.0."""
SERIAL = "20235500001"
PROGRAM_MARKER = b"# NODE_CONTROL_LOOP_BEGINS"
"""A line of ur-rtde's control program, before its main loop."""


@dataclasses.dataclass
class URPeerConfig:
    """The simulated UR controller."""

    host: str = "127.0.0.1"
    """Address every server listens on."""
    rate_hz: float = 500.0
    """Control ticks per second (the e-Series' `sync()` period is 2 ms)."""
    max_acceleration: float = 40.0
    """Largest joint acceleration of any motion, rad/s² (ur-rtde refuses larger ones in moveJ/speedJ)."""
    max_step: float = 0.1
    """The audit's bound on a servoJ target's change from the previous target, rad."""
    stats_path: Path | None = None
    """Where to write the facts (JSON)."""


@dataclasses.dataclass(frozen=True)
class ControllerState:
    """One tick of the controller, as RTDE outputs read it."""

    time: float
    """Seconds since the controller started (the `timestamp` output)."""
    joint_pos: np.ndarray
    """[6] rad."""
    joint_vel: np.ndarray
    """[6] rad/s."""
    runtime_state: int
    """STOPPED (1) or PLAYING (2)."""
    program_running: bool
    """Whether ur-rtde's control program runs (bit 1 of robot_status_bits)."""
    in_int: tuple[int, ...]
    """input_int_register_0..47."""
    in_double: tuple[float, ...]
    """input_double_register_0..47."""
    out_int: tuple[int, ...]
    """output_int_register_0..47."""
    out_double: tuple[float, ...]
    """output_double_register_0..47."""


class URController:
    """The controller state every RTDE connection shares (registers, runtime state, the arm), stepped by its own
    thread at `config.rate_hz`; `state` is the latest tick. `idle_trajectory(t) -> (q, qd)` moves the joints
    until a program commands motion."""

    def __init__(self, config: URPeerConfig, idle_trajectory: Callable[[float], tuple[np.ndarray, np.ndarray]]):
        self.config, self.idle_trajectory = config, idle_trajectory
        spec = ur5e_spec()
        self.max_velocity = spec.max_velocity
        self.audit = TargetAudit(spec, config.max_step)
        self.lock = threading.Lock()
        self.in_int, self.in_double = [0] * 48, [0.0] * 48
        self.out_int, self.out_double = [0] * 48, [0.0] * 48
        self.offset = 0
        """Register offset of the running program (ur-rtde: 0, or 24 for the upper range)."""
        self.runtime_state = STOPPED
        self.executing = False
        self.blocking: int | None = None
        """A command whose motion the main loop is waiting for."""
        self.arm: JointMotion | None = None
        self.tick = 0
        self._start = time.monotonic()
        self.facts: dict = {"programs": 0, "ignored_programs": [], "script_error": None, "dashboard": []}
        self.received: collections.Counter[int] = collections.Counter()
        """Data packages that set the command register, by command."""
        self.state = self._snapshot()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ur-controller", daemon=True)

    def start(self) -> None:
        """Start the clock; the first facts are written after its first tick, so a client that waits for them
        finds a controller whose clock is running."""
        self._start = time.monotonic()
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=2)
        self._write_facts()

    # -- what the interfaces call ----------------------------------------------------------------------

    def write_inputs(self, names: list[str], values: list) -> None:
        """One RTDE data package from a client: set the named input registers."""
        with self.lock:
            for name, value in zip(names, values, strict=True):
                if name.startswith("input_int_register_"):
                    self.in_int[int(name.rsplit("_", 1)[1])] = value
                elif name.startswith("input_double_register_"):
                    self.in_double[int(name.rsplit("_", 1)[1])] = value
            command_register = f"input_int_register_{self.offset}"
            if command_register in names:
                command = self.in_int[self.offset]
                self.received[command] += 1
                if command == 11:
                    target = Command(position=np.array(self.in_double[self.offset : self.offset + 6]))
                    joint_pos, joint_vel = self.state.joint_pos, self.state.joint_vel
                    self.audit.check(target, joint_pos, measured_window(joint_pos, joint_vel))

    def start_program(self, program: bytes) -> None:
        """A program arrived on the script port: run it if it is ur-rtde's control program."""
        first_line = program.split(b"\n", 1)[0].decode(errors="replace").strip()
        if first_line != "def rtde_control():" or PROGRAM_MARKER not in program:
            with self.lock:
                self.facts["ignored_programs"].append(first_line[:80])
            return
        offset = re.search(rb"# int register offset\n(\d+)", program)
        with self.lock:
            self._end_program()  # a new program replaces the running one
            self.offset = int(offset.group(1)) if offset else 0
            self.out_int[self.offset + 2] = 65536  # reset_async_progress(): one write, "finished"
            self.out_int[self.offset] = 1  # signal_ready()
            self.runtime_state, self.executing, self.blocking = PLAYING, False, None
            self.facts["programs"] += 1

    def stop_program(self) -> None:
        """The dashboard's `stop`."""
        with self.lock:
            self._end_program()

    # -- the 2 ms tick ---------------------------------------------------------------------------------

    def _run(self) -> None:
        period = 1.0 / self.config.rate_hz
        next_write = self._start
        while not self._closed.is_set():
            due = int((time.monotonic() - self._start) / period)
            while self.tick < due:  # after a stall, catch up tick by tick (the robot's clock kept running)
                with self.lock:
                    self._script_tick()
                    if self.arm is not None:
                        self.arm.step(period)
                    self.tick += 1
                    self.state = self._snapshot()
            now = time.monotonic()
            if now >= next_write and self.tick > 0:
                self._write_facts()
                next_write = now + 0.1
            time.sleep(max(0.0, self._start + (self.tick + 1) * period - time.monotonic()))

    def _snapshot(self) -> ControllerState:
        t = self.tick / self.config.rate_hz
        joint_pos, joint_vel = self.idle_trajectory(t) if self.arm is None else (self.arm.q.copy(), self.arm.qd.copy())
        return ControllerState(
            t, joint_pos, joint_vel, self.runtime_state, self.runtime_state == PLAYING, tuple(self.in_int),
            tuple(self.in_double), tuple(self.out_int), tuple(self.out_double),
        )  # fmt: skip

    def _script_tick(self) -> None:
        """One pass of the uploaded script's main loop (ur-rtde's `rtde_control`, from `signal_ready()` on)."""
        if self.runtime_state != PLAYING:
            return
        status = self.offset  # output_int_register_0: 1 ready, 2 done
        if self.blocking is not None:  # inside process_cmd: movej/stopj block until the arm is at rest
            if self.arm is not None and self.arm.mode == "still":
                self.blocking, self.out_int[status] = None, 2  # signal_done_with_cmd()
            return
        command = self.in_int[self.offset]
        if command in REALTIME:
            self._process(command)
            self.out_int[status] = 1  # signal_ready()
        elif command == 0:
            self.executing, self.out_int[status] = False, 1
        elif not self.executing:
            self.executing = True
            self._process(command)

    def _process(self, command: int) -> None:
        """process_cmd(command): act on the input registers; a blocking command signals done when its motion
        ends, the others at once."""
        ints, doubles = self.in_int[self.offset :], self.in_double[self.offset :]
        if command == 255:
            self._end_program()
            return
        error = _argument_error(command, ints, doubles)
        if error is not None:
            self.facts["script_error"] = f"command {command}: {error}"
            self._end_program()
            return
        if self.arm is None:  # the program takes over the arm from its idle trajectory
            self.arm = JointMotion(*self.idle_trajectory(self.tick / self.config.rate_hz), self.max_velocity)
        arm, limit = self.arm, self.config.max_acceleration
        if command == 11:
            arm.servo(np.array(doubles[:6]), lookahead=doubles[9], gain=doubles[10], max_acceleration=limit)
        elif command == 9:
            arm.speed(np.array(doubles[:6]), min(doubles[6], limit))
        elif command == 1:
            arm.move(np.array(doubles[:6]), speed=doubles[6], acceleration=min(doubles[7], limit))
        else:  # servoStop (stopl: its m/s² taken as rad/s²), speedStop, stopJ
            arm.stop(min(doubles[0], limit))
        if command != 11:
            self.audit.restart()  # the next servoJ starts a new servo session from the measured joints
        if command in (9, 11):
            self.out_int[self.offset] = 2
        else:
            self.blocking = command

    def _end_program(self) -> None:
        """The program ends (stopScript, a runtime error, the dashboard's stop): its threads die and the arm
        stops as fast as it may; the registers keep their values."""
        if self.runtime_state == PLAYING and self.arm is not None:
            self.arm.stop(self.config.max_acceleration)
        self.runtime_state, self.executing, self.blocking = STOPPED, False, None
        self.audit.restart()

    def _write_facts(self) -> None:
        if self.config.stats_path is None:
            return
        with self.lock:
            state = self.state
            facts = {
                **self.facts, "time": state.time, "runtime_state": state.runtime_state,
                "motion": "idle trajectory" if self.arm is None else self.arm.mode,
                "joint_pos": state.joint_pos, "joint_vel": state.joint_vel,
                "commands": {str(command): count for command, count in sorted(self.received.items())},
                "servo_targets": self.audit.targets, "unsafe": self.audit.unsafe, "first_unsafe": self.audit.first,
            }  # fmt: skip
            text = json.dumps(facts, default=lambda value: np.asarray(value).tolist())
        with atomic_path(self.config.stats_path) as tmp:
            tmp.write_text(text)


def _argument_error(command: int, ints: list[int], doubles: list[float]) -> str | None:
    """Why the program cannot run `command` with these input registers (from its offset on), or None."""
    if command not in MOTION:
        return "not emulated"
    if command in (1, 34) and ints[1] != 0:
        return "asynchronous moves and stops are not emulated"
    count = {1: 8, 9: 7, 11: 11}.get(command, 1)
    if not np.all(np.isfinite(doubles[:count])):
        return "a non-finite argument"
    if (command == 1 and min(doubles[6:8]) <= 0) or (command in (15, 16, 34) and doubles[0] <= 0):
        return "a speed or acceleration ≤ 0"
    return None


# -- the dashboard server and the script port ------------------------------------------------------------


def serve_dashboard(controller: URController, host: str, port: int = 29999) -> socket.socket:
    """Listen for dashboard clients (a thread each); returns the listening socket (close it to stop)."""

    def answer(command: str) -> str:
        running = controller.state.program_running
        if command == "stop":
            controller.stop_program()
            return "Stopped"
        replies = {
            "PolyscopeVersion": POLYSCOPE, "get serial number": SERIAL, "get robot model": "UR5",
            "is in remote control": "true", "robotmode": "Robotmode: RUNNING", "safetystatus": "Safetystatus: NORMAL",
            "safetymode": "Safetymode: NORMAL", "running": f"Program running: {str(running).lower()}",
            "programState": f"{'PLAYING' if running else 'STOPPED'} <unnamed>", "play": "Failed to execute: play",
            "quit": "Disconnected",
        }  # fmt: skip
        return replies.get(command, f"could not understand: '{command}'")

    def serve(client: socket.socket) -> None:
        with client, client.makefile("rb") as lines:
            client.sendall(b"Connected: Universal Robots Dashboard Server\n")
            for line in lines:
                command = line.decode(errors="replace").strip()
                with controller.lock:
                    controller.facts["dashboard"] = controller.facts["dashboard"][-99:] + [command]
                client.sendall(answer(command).encode() + b"\n")
                if command == "quit":
                    return

    return _listen(host, port, serve)


def serve_script_port(controller: URController, host: str, port: int = 30003) -> socket.socket:
    """Listen for URScript programs (a thread per client); returns the listening socket."""

    def serve(client: socket.socket) -> None:
        buffer = b""
        with client:
            while chunk := client.recv(65536):
                buffer += chunk
                while buffer:
                    if buffer.startswith((b"def ", b"sec ")):  # a program ends at its column-0 `end`
                        end = buffer.find(b"\nend\n")
                        if end < 0:
                            break
                        program, buffer = buffer[: end + 5], buffer[end + 5 :]
                        controller.start_program(program)
                    elif b"\n" in buffer:  # a single statement: not emulated
                        line, buffer = buffer.split(b"\n", 1)
                        if line.strip():
                            controller.start_program(line)
                    else:
                        break

    return _listen(host, port, serve)


def _listen(host: str, port: int, serve: Callable[[socket.socket], None]) -> socket.socket:
    server = socket.create_server((host, port))

    def accept() -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:  # closed
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=_quietly, args=(serve, client), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return server


def _quietly(serve: Callable[[socket.socket], None], client: socket.socket) -> None:
    with contextlib.suppress(OSError):  # the client reset the connection (ur-rtde's disconnect may): a normal close
        serve(client)
