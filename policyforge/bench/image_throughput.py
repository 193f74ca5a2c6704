"""Image observations: the VecEnv's tiled `fast` frames vs `mujoco.Renderer` drawing one frame per call.

Side by side in one process, interleaved over several rounds, on the same env states (arm-instructed, the VLA's
front and wrist cameras):
  tiled       policyforge's TiledRenderer (ImageConfig.quality fast): every env's frames as tiles of one buffer,
              one read-back, no shadows, reflections or multisampling;
  per frame   `mujoco.Renderer`, update_scene + render per frame with MuJoCo's default settings (what the VecEnv
              did before, `quality: full`, and what a user would write);
  no shadows  the same per-frame renderer with the fast settings (so the table separates the two gains).
And whole VecEnv steps per second with images (fast, full) and without. The last line is JSON for the largest N.

    policyforge bench image-throughput [--num-envs 16 64] [--size 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import time

import mujoco
import numpy as np
import torch

from policyforge.sims import ImageConfig, SimConfig, make_env, render

CAMERAS = ["front", "wrist"]
TASK = "arm-instructed"


def frames_per_second(draw, frames: int, repeats: int = 2) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        draw()
    return frames * repeats / (time.perf_counter() - start)


def env_steps_per_second(env, steps: int = 4) -> float:
    action = torch.zeros(env.num_envs, env.action_dim)
    env.step(action)
    start = time.perf_counter()
    for _ in range(steps):
        env.step(action)
    return env.num_envs * steps / (time.perf_counter() - start)


def measure(num_envs: int, size: int, rounds: int) -> dict:
    envs = {
        quality: make_env(
            SimConfig(task=TASK, num_envs=num_envs, image=ImageConfig(CAMERAS, size, size, quality=quality))
        )
        for quality in ("fast", "full")
    }
    envs["none"] = make_env(SimConfig(task=TASK, num_envs=num_envs))
    model = envs["none"].task.model
    generator = torch.Generator().manual_seed(0)
    for _ in range(10):  # envs spread over their workspace
        envs["none"].step(torch.rand(num_envs, envs["none"].action_dim, generator=generator) * 2 - 1)
    states = [envs["none"].batch.get_data(i, mujoco.MjData(model)) for i in range(num_envs)]
    tiled = render.TiledRenderer(model, size, size)
    renderers = {
        "per_frame": mujoco.Renderer(model, height=size, width=size),
        "no_shadows": render.fast_frame_renderer(model, size, size),
    }

    def one_by_one(renderer: mujoco.Renderer):
        def draw():
            for data in states:
                for camera in CAMERAS:
                    renderer.update_scene(data, camera=camera)
                    renderer.render()

        return draw

    draws = {"tiled": lambda: tiled.render(iter(states), CAMERAS)}
    draws.update({name: one_by_one(renderer) for name, renderer in renderers.items()})
    frames = num_envs * len(CAMERAS)
    fps: dict[str, list[float]] = {name: [] for name in draws}
    sps: dict[str, list[float]] = {name: [] for name in envs}
    for _ in range(rounds):
        for name, draw in draws.items():
            fps[name].append(frames_per_second(draw, frames))
        for name, env in envs.items():
            sps[name].append(env_steps_per_second(env))
    for renderer in [tiled, *renderers.values()]:
        renderer.close()
    for env in envs.values():
        env.close()
    fps_median = {name: float(np.median(values)) for name, values in fps.items()}
    sps_median = {name: float(np.median(values)) for name, values in sps.items()}
    return {
        "n_envs": num_envs,
        "size": size,
        "tiled_fps": round(fps_median["tiled"]),
        "per_frame_fps": round(fps_median["per_frame"]),
        "no_shadows_fps": round(fps_median["no_shadows"]),
        "tiled_vs_per_frame": round(fps_median["tiled"] / fps_median["per_frame"], 2),
        "tiled_vs_no_shadows": round(fps_median["tiled"] / fps_median["no_shadows"], 2),
        "env_sps_fast": round(sps_median["fast"], 1),
        "env_sps_full": round(sps_median["full"], 1),
        "env_sps_no_images": round(sps_median["none"], 1),
        "env_fast_vs_full": round(sps_median["fast"] / sps_median["full"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", nargs="+", type=int, default=[16, 64])
    parser.add_argument("--size", type=int, default=64, help="image side, pixels")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds (median reported)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [measure(n, args.size, args.rounds) for n in args.num_envs]
    print(
        f"{TASK}, cameras {'+'.join(CAMERAS)}, {args.size} px; frames/s of rendering alone, env steps/s of the VecEnv"
    )
    print(
        f"{'N':>4} {'tiled fps':>10} {'per-frame':>10} {'no-shadow':>10} {'tiled/per-frame':>16} "
        f"{'tiled/no-shadow':>16} {'env fast':>9} {'env full':>9} {'no images':>10} {'fast/full':>10}"
    )
    for r in rows:
        print(
            f"{r['n_envs']:4d} {r['tiled_fps']:10d} {r['per_frame_fps']:10d} {r['no_shadows_fps']:10d} "
            f"{r['tiled_vs_per_frame']:16.2f} {r['tiled_vs_no_shadows']:16.2f} {r['env_sps_fast']:9.1f} "
            f"{r['env_sps_full']:9.1f} {r['env_sps_no_images']:10.1f} {r['env_fast_vs_full']:10.2f}"
        )
    print(json.dumps(rows[-1]))


if __name__ == "__main__":
    main()
