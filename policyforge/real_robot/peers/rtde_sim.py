"""A Universal Robots controller's RTDE interface (protocol version 2, TCP 30004) on 127.0.0.1, streaming a
simulated UR5e: protocol negotiation, controller version, output recipes (with each variable's RTDE type, or
NOT_FOUND), start/pause and data packages at the requested frequency (≤ 500 Hz), big-endian as on the robot.

The joints follow a known trajectory q(t) = home + amplitude · sin(t) (t: the `timestamp` output), so a client's
readings can be checked exactly. The control side of a real controller (dashboard server on 29999, URScript
upload and the input-register handshake `RTDEControlInterface` needs) is not emulated.

    python -m policyforge.real_robot.peers.rtde_sim [--port 30004]
"""

from __future__ import annotations

import argparse
import socket
import struct
import threading
import time

import numpy as np

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
ROBOT_MODE_RUNNING, SAFETY_MODE_NORMAL, RUNTIME_PLAYING = 7, 1, 2


def joints(t: float) -> tuple[np.ndarray, np.ndarray]:
    """The peer's joint positions and velocities at time t (s)."""
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


def output_value(name: str, t: float):
    q, qd = joints(t)
    values = {
        "timestamp": t, "actual_q": q, "target_q": q, "actual_qd": qd, "target_qd": qd,
        "actual_TCP_pose": tcp_pose(q), "target_TCP_pose": tcp_pose(q), "robot_mode": ROBOT_MODE_RUNNING,
        "safety_mode": SAFETY_MODE_NORMAL, "safety_status": SAFETY_MODE_NORMAL, "runtime_state": RUNTIME_PLAYING,
        "speed_scaling": 1.0, "target_speed_fraction": 1.0, "joint_mode": [253] * 6, "robot_status_bits": 0b1111,
    }  # fmt: skip
    if name in values:
        return values[name]
    kind = OUTPUTS[name]
    return [0] * int(TYPES[kind][0]) if TYPES[kind][0].isdigit() else 0


def _packet(kind: str, payload: bytes = b"") -> bytes:
    return struct.pack(">HB", 3 + len(payload), ord(kind)) + payload


class RTDEPeer:
    """Serves RTDE clients on `port` (one thread per client) until `close()`."""

    def __init__(self, port: int = 30004, host: str = "127.0.0.1"):
        self.server = socket.create_server((host, port), reuse_port=False)
        self.server.settimeout(0.2)
        self.start_time = time.monotonic()
        self.requested: list[str] = []
        """Every output variable a client asked for."""
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
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        recipes: dict[int, tuple[list[str], str, float]] = {}
        streaming = False
        next_send = time.monotonic()
        client.settimeout(0.001)
        with client:
            while not self._closed.is_set():
                try:
                    kind, payload = _receive(client)
                except TimeoutError:
                    kind = None
                except (ConnectionError, OSError):
                    return
                if kind is not None:
                    reply, started = self._answer(kind, payload, recipes)
                    streaming = started if started is not None else streaming
                    if reply:
                        client.sendall(reply)
                now = time.monotonic()
                if streaming and recipes and now >= next_send:
                    for recipe_id, (names, layout, _) in recipes.items():
                        t = now - self.start_time
                        values = [v for name in names for v in np.atleast_1d(output_value(name, t)).tolist()]
                        client.sendall(_packet("U", struct.pack(">B" + layout, recipe_id, *values)))
                    next_send += 1.0 / max(f for _, _, f in recipes.values())
                    next_send = max(next_send, now - 0.01)

    def _answer(self, kind: str, payload: bytes, recipes: dict) -> tuple[bytes, bool | None]:
        if kind == "V":  # request protocol version
            (version,) = struct.unpack(">H", payload[:2])
            return _packet("V", struct.pack(">B", int(version in (1, 2)))), None
        if kind == "v":  # controller version
            return _packet("v", struct.pack(">IIII", *VERSION)), None
        if kind == "O":  # setup outputs: frequency + variable names
            (frequency,) = struct.unpack(">d", payload[:8])
            names = [name for name in payload[8:].decode().split(",") if name]  # clients may end with ","
            self.requested += names
            types = [OUTPUTS.get(name, "NOT_FOUND") for name in names]
            recipe_id = len(recipes) + 1
            if "NOT_FOUND" not in types:
                layout = "".join(TYPES[t] for t in types)
                recipes[recipe_id] = (names, layout, min(frequency, 500.0))
            return _packet("O", struct.pack(">B", recipe_id) + ",".join(types).encode()), None
        if kind == "I":  # setup inputs: this peer takes none
            names = payload.decode().split(",")
            return _packet("I", struct.pack(">B", 0) + ",".join("NOT_FOUND" for _ in names).encode()), None
        if kind == "S":
            return _packet("S", struct.pack(">B", 1)), True
        if kind == "P":
            return _packet("P", struct.pack(">B", 1)), False
        return b"", None


def _receive(client: socket.socket) -> tuple[str, bytes]:
    header = _read_exact(client, 3)
    size, kind = struct.unpack(">HB", header)
    client.settimeout(1.0)
    payload = _read_exact(client, size - 3)
    client.settimeout(0.001)
    return chr(kind), payload


def _read_exact(client: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = client.recv(count - len(data))
        if not chunk:
            raise ConnectionError("client closed the connection")
        data += chunk
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=30004)
    args = parser.parse_args()
    peer = RTDEPeer(args.port)
    try:
        while True:
            time.sleep(1.0)
    except KeyboardInterrupt:
        peer.close()


if __name__ == "__main__":
    main()
