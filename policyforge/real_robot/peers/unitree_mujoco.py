"""Unitree's own Go2 simulator — unitreerobotics/unitree_mujoco, `simulate_python` — run headless, as a peer
that nobody here wrote: their scene and their DDS bridge (`unitree_sdk2py_bridge.UnitreeSdk2Bridge`, which
subscribes `rt/lowcmd` and publishes `rt/lowstate` with unitree_sdk2py), imported from a checkout unmodified.

Their `unitree_mujoco.py` steps the physics beside MuJoCo's viewer window; this steps it the same way (one
`mj_step` per `config.SIMULATE_DT`, under the lock the bridge's threads share) without a window, and writes what
happened to the robot (height, uprightness, distance walked) to a facts file for tests and the sim-to-sim table.
Set-up (once): `git clone https://github.com/unitreerobotics/unitree_mujoco` and `pip install pygame` (their
bridge imports it; no joystick is opened). Their `config.py` chooses the robot (go2); the DDS domain and the
interface are taken from the flags instead of its DOMAIN_ID / INTERFACE.

    python -m policyforge.real_robot.peers.unitree_mujoco --checkout ~/unitree_mujoco --domain-id 1 --stats f.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import sys
import time
from pathlib import Path

import mujoco
import numpy as np

from policyforge.config import ConfigError
from policyforge.io import atomic_path
from policyforge.sims.xmath import projected_gravity

FACTS_PERIOD_S = 0.1
"""How often the facts file is rewritten, s."""
STANDING_HEIGHT, FALLEN_HEIGHT = 0.2, 0.12
"""Base heights, m: above the first the Go2 stands (~0.27 m when it does); below the second, or tilted past 60°,
it has fallen (lying, ~0.08 m)."""
SETTLE_S = 1.0
"""Simulated seconds for the robot to drop from its initial pose onto the floor."""


def load_bridge(checkout: Path):
    """Their `config` and `unitree_sdk2py_bridge` modules, imported from `checkout`/simulate_python (whose
    relative scene path is resolved from there)."""
    simulate = Path(checkout).expanduser().resolve() / "simulate_python"
    if not (simulate / "unitree_sdk2py_bridge.py").is_file():
        raise ConfigError(
            "checkout",
            f"{checkout} is not a unitree_mujoco checkout (no simulate_python/unitree_sdk2py_bridge.py): "
            "git clone https://github.com/unitreerobotics/unitree_mujoco",
        )
    try:
        import pygame  # noqa: F401  (their bridge imports it at the top)
    except ImportError:
        raise ConfigError("checkout", "unitree_mujoco's bridge imports pygame: pip install pygame") from None
    sys.path.insert(0, str(simulate))
    os.chdir(simulate)  # config.ROBOT_SCENE is "../unitree_robots/<robot>/scene.xml"
    return importlib.import_module("config"), importlib.import_module("unitree_sdk2py_bridge")


class CommandWatch:
    """Our own subscriber of `rt/lowcmd` beside their bridge's: how many LowCmds came, and whether the newest one
    holds the legs (any kp > 0) or lets them go (damping)."""

    def __init__(self):
        from unitree_sdk2py.core.channel import ChannelSubscriber
        from unitree_sdk2py.idl.unitree_go.msg.dds_ import LowCmd_

        self.count, self.stiff = 0, False
        self._subscriber = ChannelSubscriber("rt/lowcmd", LowCmd_)
        self._subscriber.Init(self._on_command, 10)

    def _on_command(self, msg) -> None:
        self.count += 1
        self.stiff = any(motor.kp > 0 for motor in msg.motor_cmd[:12])


def serve(checkout: Path, domain_id: int, interface: str, seconds: float | None, stats_path: Path | None) -> dict:
    """Run their simulator until `seconds` of simulated time or a stop signal; return the facts."""
    from unitree_sdk2py.core.channel import ChannelFactoryInitialize

    config, bridge_module = load_bridge(checkout)
    model = mujoco.MjModel.from_xml_path(config.ROBOT_SCENE)
    data = mujoco.MjData(model)
    model.opt.timestep = config.SIMULATE_DT
    ChannelFactoryInitialize(domain_id, interface)
    # their bridge writes ctrl from its DDS callback and reads sensordata from its timer threads; their loop's lock
    # only keeps the viewer out of mj_step, so without a viewer there is nothing to lock
    bridge_module.UnitreeSdk2Bridge(model, data)
    controlled = CommandWatch()
    stopping: list[bool] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.append(True))
    start_xy, steps, start = data.qpos[:2].copy(), 0, time.monotonic()
    facts = {"robot": config.ROBOT, "stood": False, "min_base_height": np.inf, "min_upright": np.inf, "falls": 0}
    facts["commands"] = 0
    fallen, next_write = False, start
    while not stopping and (seconds is None or steps * model.opt.timestep < seconds):
        mujoco.mj_step(model, data)
        steps += 1
        upright = float(-projected_gravity(data.qpos[None, 3:7], np)[0, 2])
        height = float(data.qpos[2])
        settled = steps * model.opt.timestep > SETTLE_S  # it starts in the air, legs out, and drops
        stiff, facts["commands"] = controlled.stiff, controlled.count
        facts["stood"] = facts["stood"] or (settled and stiff and height > STANDING_HEIGHT and upright > 0.9)
        # counted while a controller holds the robot, once it has stood it up: it starts lying down, and when the
        # controller lets go (damping, kp 0) a Go2 sinks to the ground, which is no fall
        if facts["stood"] and stiff:
            facts["min_base_height"] = min(facts["min_base_height"], height)
            facts["min_upright"] = min(facts["min_upright"], upright)
            down = upright < 0.5 or height < FALLEN_HEIGHT
            facts["falls"] += down and not fallen
            fallen = down
        if stats_path is not None and time.monotonic() >= next_write:
            _write(stats_path, facts, data, start_xy, steps * model.opt.timestep, upright)
            next_write = time.monotonic() + FACTS_PERIOD_S
        delay = start + steps * model.opt.timestep - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    if stats_path is not None:
        _write(stats_path, facts, data, start_xy, steps * model.opt.timestep, upright)
    return facts


def _write(path: Path, facts: dict, data: mujoco.MjData, start_xy: np.ndarray, sim_seconds: float, upright: float):
    summary = {
        **facts,
        "sim_seconds": sim_seconds,
        "base_position": data.qpos[:3].tolist(),
        "base_height": float(data.qpos[2]),
        "upright": upright,
        "displacement": (data.qpos[:2] - start_xy).tolist(),
    }
    with atomic_path(Path(path)) as tmp:
        tmp.write_text(json.dumps(summary, default=lambda value: np.asarray(value).tolist()))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, required=True, help="a clone of unitreerobotics/unitree_mujoco")
    parser.add_argument("--domain-id", type=int, default=1, help="DDS domain (their config's default is 1)")
    parser.add_argument("--interface", default="lo")
    parser.add_argument("--seconds", type=float, default=None, help="stop after this much simulated time")
    parser.add_argument("--stats", type=Path, default=None, help="write the facts (JSON) here")
    args = parser.parse_args(argv)
    stats = args.stats.resolve() if args.stats is not None else None  # before their working directory is set
    serve(args.checkout, args.domain_id, args.interface, args.seconds, stats)
    os._exit(0)  # their bridge's timer threads are not daemons


if __name__ == "__main__":
    main()
