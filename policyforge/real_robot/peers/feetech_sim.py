"""Feetech STS bus servos (SO-100-class arms) on a pseudo-terminal: the serial protocol (0xFF 0xFF, ID, length,
instruction, parameters, checksum) with PING, READ, WRITE, SYNC_READ and SYNC_WRITE, an STS3215 control table
per servo, and positions that move towards their goals while torque is enabled.

    bus = FeetechBusPeer(ids=[1, 2, 3, 4, 5, 6]); bus.port  # e.g. /dev/pts/3 — open it like a USB adapter
"""

from __future__ import annotations

import os
import select
import threading
import time
import tty

import numpy as np

MODEL_NUMBER, TORQUE_ENABLE, GOAL_POSITION, PRESENT_POSITION, PRESENT_SPEED = 3, 40, 42, 56, 58
"""STS3215 control-table addresses (little-endian words)."""
STS3215 = 777
"""Model number the peer reports."""
PING, READ, WRITE, SYNC_READ, SYNC_WRITE = 0x01, 0x02, 0x03, 0x82, 0x83


def checksum(body: bytes) -> int:
    """Feetech checksum: the inverted low byte of the sum of ID, length, instruction/error and parameters."""
    return ~sum(body) & 0xFF


class FeetechBusPeer:
    """Servos `ids` behind a pseudo-terminal (`port`), served by a background thread until `close()`.
    `max_speed`: raw steps per second a servo moves towards its goal."""

    def __init__(self, ids: list[int], max_speed: float = 3000.0, tick: float = 0.002):
        self.master, slave = os.openpty()
        tty.setraw(self.master)
        tty.setraw(slave)
        self.port = os.ttyname(slave)
        self._slave = slave
        self.memory = {servo: bytearray(256) for servo in ids}
        for servo in ids:
            self._put(servo, MODEL_NUMBER, STS3215)
            self._put(servo, PRESENT_POSITION, 2048)
            self._put(servo, GOAL_POSITION, 2048)
        self.max_speed, self.tick = max_speed, tick
        self.goals_written: list[tuple[int, int]] = []
        """Every (id, goal) written, for audits."""
        self.bad_packets = 0
        self.silent_until = 0.0
        """Until this time (monotonic s) the servos answer nothing (a loose cable)."""
        self.bad_replies: list[str] = []
        """Faults of the next replies, one each: "short" (a well-formed status packet without its data, as a late
        reply to an earlier instruction looks) or "garbled" (line noise: a header, then bytes that make no packet)."""
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    # -- the servos --------------------------------------------------------------------------------------

    def _put(self, servo: int, address: int, value: int) -> None:
        self.memory[servo][address : address + 2] = int(value & 0xFFFF).to_bytes(2, "little")

    def word(self, servo: int, address: int) -> int:
        return int.from_bytes(self.memory[servo][address : address + 2], "little")

    def set_position(self, servo: int, raw: int) -> None:
        """Move a servo by hand (e.g. a person posing the arm during calibration)."""
        with self._lock:
            self._put(servo, PRESENT_POSITION, raw)
            self._put(servo, GOAL_POSITION, raw)

    def _move(self, dt: float) -> None:
        with self._lock:
            for servo, memory in self.memory.items():
                if not memory[TORQUE_ENABLE]:
                    continue
                present, goal = self.word(servo, PRESENT_POSITION), self.word(servo, GOAL_POSITION)
                step = int(np.clip(goal - present, -self.max_speed * dt, self.max_speed * dt))
                self._put(servo, PRESENT_POSITION, present + step)
                speed = int(abs(step) / max(dt, 1e-6))  # sign-magnitude: bit 15 is the sign
                self._put(servo, PRESENT_SPEED, speed if step >= 0 else (1 << 15) | speed)

    # -- the protocol ------------------------------------------------------------------------------------

    def _serve(self) -> None:
        buffer, last = b"", time.monotonic()
        while not self._closed.is_set():
            ready, _, _ = select.select([self.master], [], [], self.tick)
            if ready:
                try:
                    buffer += os.read(self.master, 1024)
                except OSError:
                    return
                buffer = self._handle(buffer)
            now = time.monotonic()
            self._move(now - last)
            last = now

    def _handle(self, buffer: bytes) -> bytes:
        """Answer every complete packet in `buffer`; return the incomplete rest."""
        while True:
            start = buffer.find(b"\xff\xff")
            if start < 0 or len(buffer) < start + 4:
                return buffer[start:] if start >= 0 else b""
            servo, length = buffer[start + 2], buffer[start + 3]
            end = start + 4 + length
            if len(buffer) < end:
                return buffer[start:]
            body = buffer[start + 2 : end - 1]
            if checksum(body) != buffer[end - 1]:
                self.bad_packets += 1
            else:
                self._execute(servo, body[2], bytes(body[3:]))
            buffer = buffer[end:]

    def _execute(self, servo: int, instruction: int, params: bytes) -> None:
        with self._lock:
            if instruction == SYNC_WRITE:
                address, size = params[0], params[1]
                for i in range(2, len(params), size + 1):
                    self._write(params[i], address, params[i + 1 : i + 1 + size])
            elif instruction == SYNC_READ:
                address, size = params[0], params[1]
                for target in params[2:]:
                    if target in self.memory:
                        self._reply(target, self.memory[target][address : address + size])
            elif servo in self.memory:
                if instruction == PING:
                    self._reply(servo, b"")
                elif instruction == READ:
                    self._reply(servo, self.memory[servo][params[0] : params[0] + params[1]])
                elif instruction == WRITE:
                    self._write(servo, params[0], params[1:])
                    self._reply(servo, b"")

    def _write(self, servo: int, address: int, data: bytes) -> None:
        if servo not in self.memory:
            return
        self.memory[servo][address : address + len(data)] = data
        if address <= GOAL_POSITION < address + len(data) - 1:
            self.goals_written.append((servo, self.word(servo, GOAL_POSITION)))

    def silence(self, seconds: float) -> None:
        """Answer no packet for `seconds` (writes still land): a dropped state stream."""
        self.silent_until = time.monotonic() + seconds

    def corrupt_replies(self, *faults: str) -> None:
        """Answer the next len(faults) packets with these faults ("short" or "garbled"; see `bad_replies`)."""
        assert set(faults) <= {"short", "garbled"}, faults
        with self._lock:
            self.bad_replies += faults

    def _reply(self, servo: int, data: bytes) -> None:
        if time.monotonic() < self.silent_until:
            return
        fault = self.bad_replies.pop(0) if self.bad_replies else None
        if fault == "short":
            data = b""
        body = bytes([servo, len(data) + 2, 0]) + bytes(data)
        packet = b"\xff\xff" + body + bytes([checksum(body)])
        if fault == "garbled":
            packet = b"\xff\xff" + bytes([servo, 0x05]) + bytes([0xFF, 0xFF, 0xFE, 0x00])
        os.write(self.master, packet)

    def close(self) -> None:
        """Stop serving and close the pseudo-terminal (an unplugged adapter). Idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._thread.join(timeout=1)
        os.close(self.master)
        os.close(self._slave)
