"""A simulated Universal Robots UR5e controller (PolyScope 5.15) on 127.0.0.1: its RTDE interface (protocol
version 2, TCP 30004) here; the dashboard server (29999), the script port (30003) and the control program
ur-rtde uploads, with the arm's motion, in `ur_script.py` and `ur_motion.py`.

RTDE: protocol negotiation, controller version, output recipes (each variable's RTDE type, or NOT_FOUND), input
recipes (numbered 1, 2, … per connection, as ur-rtde's control client expects) whose data packages write the
controller's shared input registers, start/pause, and data packages at the requested frequency (≤ 500 Hz) from
the controller's latest 2 ms tick, big-endian as on the robot. Until a program commands motion the joints follow
q(t) = home + amplitude · sin(t) (t: the `timestamp` output), so a client's readings can be checked exactly.

    python -m policyforge.real_robot.peers.rtde_sim [--stats facts.json] [--max-step 0.1]
"""

from __future__ import annotations

import argparse
import dataclasses
import select
import signal
import socket
import struct
import threading
import time
from pathlib import Path

import numpy as np

from policyforge.real_robot.peers.ur_script import (
    ControllerState,
    URController,
    URPeerConfig,
    serve_dashboard,
    serve_script_port,
)

HOME = np.array([0.0, -1.57, 1.57, -1.57, -1.57, 0.0])
AMPLITUDE = np.array([0.2, 0.1, 0.1, 0.1, 0.1, 0.2])
UR5E_DH = {  # (d, a, alpha) per joint, m / rad: Universal Robots' published DH parameters
    "d": [0.1625, 0.0, 0.0, 0.1333, 0.0997, 0.0996],
    "a": [0.0, -0.425, -0.3922, 0.0, 0.0, 0.0],
    "alpha": [np.pi / 2, 0.0, 0.0, np.pi / 2, -np.pi / 2, 0.0],
}
VERSION = (5, 15, 0, 0)
"""The controller software version the peer reports (PolyScope 5.15)."""

TYPES = {
    "DOUBLE": "d", "UINT64": "Q", "UINT32": "I", "INT32": "i", "UINT8": "B", "BOOL": "?",
    "VECTOR3D": "3d", "VECTOR6D": "6d", "VECTOR6INT32": "6i", "VECTOR6UINT32": "6I",
}  # fmt: skip
_VECTOR6D = (
    "target_q target_qd target_qdd target_current target_moment actual_q actual_qd actual_current "
    "joint_control_output actual_TCP_pose actual_TCP_speed actual_TCP_force target_TCP_pose target_TCP_speed "
    "joint_temperatures actual_joint_voltage ft_raw_wrench payload_inertia actual_current_window"
)
_DOUBLE = (
    "timestamp actual_execution_time speed_scaling target_speed_fraction actual_momentum actual_main_voltage "
    "actual_robot_voltage actual_robot_current standard_analog_input0 standard_analog_input1 "
    "standard_analog_output0 standard_analog_output1 payload tool_analog_input0 tool_analog_input1 "
    "tool_output_current tcp_force_scalar"
)
OUTPUTS = {
    **dict.fromkeys(_VECTOR6D.split(), "VECTOR6D"),
    **dict.fromkeys(_DOUBLE.split(), "DOUBLE"),
    **dict.fromkeys(["actual_digital_input_bits", "actual_digital_output_bits"], "UINT64"),
    **dict.fromkeys(["robot_mode", "safety_mode", "safety_status", "tool_mode"], "INT32"),
    "joint_mode": "VECTOR6INT32",
    "actual_tool_accelerometer": "VECTOR3D",
    "payload_cog": "VECTOR3D",
    **dict.fromkeys(
        [
            "runtime_state",
            "robot_status_bits",
            "safety_status_bits",
            "output_bit_registers0_to_31",
            "output_bit_registers32_to_63",
            "input_bit_registers0_to_31",
            "input_bit_registers32_to_63",
        ],
        "UINT32",
    ),
    **{f"output_int_register_{i}": "INT32" for i in range(48)},
    **{f"output_double_register_{i}": "DOUBLE" for i in range(48)},
    **{f"input_int_register_{i}": "INT32" for i in range(48)},
    **{f"input_double_register_{i}": "DOUBLE" for i in range(48)},
}
"""RTDE output variables and their types (RTDE guide, e-Series)."""
INPUTS = {
    **{f"input_int_register_{i}": "INT32" for i in range(48)},
    **{f"input_double_register_{i}": "DOUBLE" for i in range(48)},
    **dict.fromkeys(["input_bit_registers0_to_31", "input_bit_registers32_to_63", "speed_slider_mask"], "UINT32"),
    "speed_slider_fraction": "DOUBLE",
    "external_force_torque": "VECTOR6D",
}
"""RTDE input variables and their types."""
ROBOT_MODE_RUNNING, SAFETY_MODE_NORMAL, SAFETY_STATUS_NORMAL = 7, 1, 0b1


def joints(t: float) -> tuple[np.ndarray, np.ndarray]:
    """The joints' idle trajectory, until a program commands motion: positions and velocities at time t (s)."""
    return HOME + AMPLITUDE * np.sin(t), AMPLITUDE * np.cos(t)


def tcp_pose(q: np.ndarray) -> np.ndarray:
    """UR5e flange pose [x, y, z, rx, ry, rz] (m, rotation vector) from joints [6] by the DH chain."""
    transform = np.eye(4)
    for theta, d, a, alpha in zip(q, UR5E_DH["d"], UR5E_DH["a"], UR5E_DH["alpha"], strict=True):
        ct, st, ca, sa = np.cos(theta), np.sin(theta), np.cos(alpha), np.sin(alpha)
        transform = transform @ np.array([[ct, -st * ca, st * sa, a * ct], [st, ct * ca, -ct * sa, a * st],
                                          [0, sa, ca, d], [0, 0, 0, 1]])  # fmt: skip
    rotation = transform[:3, :3]
    angle = np.arccos(np.clip((np.trace(rotation) - 1) / 2, -1, 1))
    axis = np.array([rotation[2, 1] - rotation[1, 2], rotation[0, 2] - rotation[2, 0], rotation[1, 0] - rotation[0, 1]])
    vector = axis * (angle / (2 * np.sin(angle))) if angle > 1e-6 else np.zeros(3)
    return np.concatenate([transform[:3, 3], vector])


def output_values(names: list[str], state: ControllerState) -> list:
    """The values of the output variables `names` at `state`, flattened in wire order."""
    q, qd = state.joint_pos, state.joint_vel
    pose = tcp_pose(q) if any(name.endswith("TCP_pose") for name in names) else None
    fixed = {
        "timestamp": state.time, "actual_q": q, "target_q": q, "actual_qd": qd, "target_qd": qd,
        "actual_TCP_pose": pose, "target_TCP_pose": pose, "robot_mode": ROBOT_MODE_RUNNING,
        "safety_mode": SAFETY_MODE_NORMAL, "safety_status": SAFETY_MODE_NORMAL, "runtime_state": state.runtime_state,
        "speed_scaling": 1.0, "target_speed_fraction": 1.0, "joint_mode": [253] * 6,
        "robot_status_bits": 0b1 | (state.program_running << 1),  # power on, program running
        "safety_status_bits": SAFETY_STATUS_NORMAL,
    }  # fmt: skip
    registers = {"output_int": state.out_int, "output_double": state.out_double, "input_int": state.in_int,
                 "input_double": state.in_double}  # fmt: skip
    values = []
    for name in names:
        kind, _, index = name.partition("_register_")
        if name in fixed:
            value = fixed[name]
        elif kind in registers:
            value = registers[kind][int(index)]
        else:
            value = [0] * _width(OUTPUTS[name])
        values.extend(np.atleast_1d(value).tolist())
    return values


def _width(kind: str) -> int:
    return int(TYPES[kind][0]) if TYPES[kind][0].isdigit() else 1


def _packet(kind: str, payload: bytes = b"") -> bytes:
    return struct.pack(">HB", 3 + len(payload), ord(kind)) + payload


@dataclasses.dataclass
class _Connection:
    """One RTDE client's recipes, by id: outputs (names, struct layout, frequency) and inputs (names, layout)."""

    outputs: dict[int, tuple[list[str], str, float]] = dataclasses.field(default_factory=dict)
    inputs: dict[int, tuple[list[str], str]] = dataclasses.field(default_factory=dict)
    streaming: bool = False


class RTDEPeer:
    """Serves RTDE clients of `controller` on `port` (one thread per client) until `close()`."""

    def __init__(self, controller: URController, port: int = 30004, host: str = "127.0.0.1"):
        self.controller = controller
        self.server = socket.create_server((host, port), reuse_port=False)
        self.server.settimeout(0.2)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=2)
        self.server.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        """Answer each request in order, drain every data package the client sent, and stream at the
        recipes' frequency; an EOF or a reset (ur-rtde's disconnect may reset) ends the connection."""
        connection, buffer, next_send = _Connection(), b"", 0.0
        client.settimeout(1.0)
        with client:
            while not self._closed.is_set():
                wait = max(0.0, next_send - time.monotonic()) if connection.streaming else 0.2
                try:
                    if select.select([client], [], [], wait)[0]:
                        chunk = client.recv(65536)
                        if not chunk:
                            return
                        buffer += chunk
                        while len(buffer) >= 3 and len(buffer) >= (size := struct.unpack(">H", buffer[:2])[0]):
                            if size < 3:
                                return
                            kind, payload, buffer = chr(buffer[2]), buffer[3:size], buffer[size:]
                            started = connection.streaming
                            if reply := self._answer(kind, payload, connection):
                                client.sendall(reply)
                            if connection.streaming and not started:
                                next_send = time.monotonic()
                    now = time.monotonic()
                    if connection.streaming and connection.outputs and now >= next_send:
                        state = self.controller.state
                        for recipe_id, (names, layout, _) in connection.outputs.items():
                            values = output_values(names, state)
                            client.sendall(_packet("U", struct.pack(">B" + layout, recipe_id, *values)))
                        next_send += 1.0 / max(f for _, _, f in connection.outputs.values())
                        next_send = max(next_send, now - 0.01)
                except OSError:
                    return

    def _answer(self, kind: str, payload: bytes, connection: _Connection) -> bytes:
        if kind == "V":  # request protocol version
            (version,) = struct.unpack(">H", payload[:2])
            return _packet("V", struct.pack(">B", int(version in (1, 2))))
        if kind == "v":  # controller version
            return _packet("v", struct.pack(">IIII", *VERSION))
        if kind == "O":  # setup outputs: frequency + variable names
            (frequency,) = struct.unpack(">d", payload[:8])
            names = [name for name in payload[8:].decode().split(",") if name]  # clients may end with ","
            types = [OUTPUTS.get(name, "NOT_FOUND") for name in names]
            recipe_id = len(connection.outputs) + 1
            if "NOT_FOUND" not in types:
                layout = "".join(TYPES[t] for t in types)
                connection.outputs[recipe_id] = (names, layout, min(frequency, 500.0))
            return _packet("O", struct.pack(">B", recipe_id) + ",".join(types).encode())
        if kind == "I":  # setup inputs: variable names
            names = [name for name in payload.decode().split(",") if name]
            types = [INPUTS.get(name, "NOT_FOUND") for name in names]
            recipe_id = 0
            if "NOT_FOUND" not in types:
                recipe_id = len(connection.inputs) + 1
                connection.inputs[recipe_id] = (names, "".join(TYPES[t] for t in types))
            return _packet("I", struct.pack(">B", recipe_id) + ",".join(types).encode())
        if kind == "U":  # a data package of an input recipe
            names, layout = connection.inputs.get(payload[0], ([], ""))
            try:
                flat = struct.unpack(">" + layout, payload[1:])
            except struct.error:  # an unknown recipe or a wrong length: the controller drops it
                return b""
            values, start = [], 0
            for name in names:
                width = _width(INPUTS[name])
                values.append(flat[start] if width == 1 else flat[start : start + width])
                start += width
            self.controller.write_inputs(names, values)
            return b""
        if kind in "SP":  # start / pause the stream
            connection.streaming = kind == "S"
            return _packet(kind, struct.pack(">B", 1))
        return b""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=30004, help="RTDE port (dashboard 29999, script 30003)")
    parser.add_argument("--stats", type=Path, default=None, help="write the controller's facts here (JSON)")
    parser.add_argument("--max-step", type=float, default=0.1, help="audit: largest servoJ target step, rad")
    args = parser.parse_args()
    config = URPeerConfig(max_step=args.max_step, stats_path=args.stats)
    controller = URController(config, joints)
    servers = [serve_dashboard(controller, config.host), serve_script_port(controller, config.host)]
    rtde = RTDEPeer(controller, args.port, config.host)
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    controller.start()  # every port listens by now; the first facts follow the first tick
    while not stopping.is_set():  # a timed wait, so the signal handlers get to run
        stopping.wait(0.5)
    rtde.close()
    for server in servers:
        server.close()
    controller.close()


if __name__ == "__main__":
    main()
