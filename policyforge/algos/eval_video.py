"""Evaluation videos that read at a glance: the first envs of an evaluation side by side, each tile ending on the
last frame of its own episode (the state before the auto-reset, `VecEnv.render(final=True)`), frozen there with its
outcome drawn in (success / failure, or the return for tasks without a success flag) while the others play on.

    film = EvalFilm(env, camera, tiles=4, seconds=10.0)    # after env.reset: the first frame
    obs, _, _, _, info = env.step(action)
    film.record(info)                                       # after every step, until film.done
    write_video(path, film.frames, film.fps)
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from policyforge.sims.vec_env import StepInfo, VecEnv

VIDEO_FPS = 25.0
"""Videos are filmed at about this rate (every k-th control step), whatever the control rate."""
TILE_WIDTH, TILE_HEIGHT = 320, 240
"""Pixels of one env's tile (a 2×2 grid of four is 640×480)."""
HOLD_SECONDS = 1.0
"""The finished grid stays this long at the end of the video, so the last tiles' outcomes can be read."""
BORDER = 3
"""Width in pixels of the outcome-coloured frame around a finished tile."""
OUTCOME_COLOURS = {"success": (30, 150, 60), "failure": (200, 40, 40), "return": (40, 70, 160)}
"""RGB of the label and border: success, failure, and the return of a task without a success flag."""


class EvalFilm:
    """Frames of the first `tiles` envs of an evaluation, from their first episode to its end."""

    def __init__(self, env: VecEnv, camera: str | None, tiles: int = 4, seconds: float = 10.0):
        self.env, self.camera = env, camera
        self.ids = np.arange(min(tiles, env.num_envs))
        """The filmed envs."""
        self.every = max(1, round(1.0 / (VIDEO_FPS * env.control_dt)))
        """A frame every this many control steps."""
        self.last_step = int(seconds / env.control_dt)
        """Filming stops after this step even if some filmed episodes go on (they end unlabelled)."""
        texts = env.instructions()
        self.captions = [texts[i] for i in self.ids] if texts is not None else None
        """Each filmed episode's instruction (instructed tasks), written under its tiles: read at the reset."""
        self.tiles = self._render(np.ones(len(self.ids), dtype=bool), np.zeros(len(self.ids), dtype=bool))
        """The latest frame of each filmed env [k, H, W, 3] uint8; a finished env's final, labelled frame."""
        self.ended = np.zeros(len(self.ids), dtype=bool)
        """Which filmed envs have finished their first episode."""
        self.frames: list[np.ndarray] = [tile_grid(self.tiles)]
        """The video so far: grids [rows·H, cols·W, 3] uint8."""
        self.step = 0

    @property
    def fps(self) -> float:
        """Frames per second of simulated time."""
        return 1.0 / (self.env.control_dt * self.every)

    @property
    def done(self) -> bool:
        """Every filmed episode has ended, or the film reached its length."""
        return bool(self.ended.all()) or self.step >= self.last_step

    def record(self, info: StepInfo) -> None:
        """Film the step whose `info` this is: the filmed envs' frames every `every` steps, and the last frame of
        each filmed episode that ended at this step (labelled with its outcome)."""
        if self.done:
            return
        self.step += 1
        episode = info["episode"]
        ending = episode["done"][self.ids].cpu().numpy() & ~self.ended
        sample = self.step % self.every == 0
        live = ~self.ended & (ending | sample)
        if live.any():
            self.tiles[live] = self._render(live, ending[live])
        for row in np.flatnonzero(ending):
            env = int(self.ids[row])
            if "success" in info:
                text = kind = "success" if bool(episode["success"][env]) else "failure"
            else:
                text, kind = f"return {float(episode['return'][env]):.1f}", "return"
            self.tiles[row] = draw_label(self.tiles[row], text, OUTCOME_COLOURS[kind])
        self.ended |= ending
        if sample or self.done:
            self.frames.append(tile_grid(self.tiles))
        if self.ended.all():
            self.frames += [self.frames[-1]] * round(HOLD_SECONDS * self.fps)

    def _render(self, rows: np.ndarray, ending: np.ndarray) -> np.ndarray:
        """Frames [n, H, W, 3] of the filmed envs at `rows` (bool [k]); `ending` (bool [n]) marks those whose episode
        ended at the last step: their pre-reset state, or, where the backend cannot render it, their last frame."""
        ids = self.ids[rows]
        try:
            frames = self.env.render(self.camera, env_ids=ids, width=TILE_WIDTH, height=TILE_HEIGHT, final=True)
        except NotImplementedError:  # gym resets inside its step: an ended tile keeps the frame filmed before
            frames = self.tiles[rows].copy()
            if (~ending).any():
                frames[~ending] = self.env.render(
                    self.camera, env_ids=ids[~ending], width=TILE_WIDTH, height=TILE_HEIGHT
                )
            return frames
        if self.captions is not None:
            captions = [self.captions[row] for row in np.flatnonzero(rows)]
            frames = np.stack([draw_caption(frame, text) for frame, text in zip(frames, captions, strict=True)])
        return frames


def draw_label(frame: np.ndarray, text: str, colour: tuple[int, int, int]) -> np.ndarray:
    """`frame` [H, W, 3] uint8 with `text` in white on a `colour` banner at its top left and a `colour` border."""
    image = Image.fromarray(np.ascontiguousarray(frame))
    draw = ImageDraw.Draw(image)
    height, width = frame.shape[:2]
    draw.rectangle((0, 0, width - 1, height - 1), outline=colour, width=BORDER)
    font = _font(max(10, height // 12))
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    pad = max(3, height // 60)
    draw.rectangle((0, 0, right - left + 2 * pad, bottom - top + 2 * pad), fill=colour)
    draw.text((pad - left, pad - top), text, fill=(255, 255, 255), font=font)
    return np.asarray(image)


def draw_caption(frame: np.ndarray, text: str) -> np.ndarray:
    """`frame` [H, W, 3] uint8 with `text` in white on a dark band along its bottom, wrapped to the frame's width."""
    image = Image.fromarray(np.ascontiguousarray(frame))
    draw = ImageDraw.Draw(image)
    height, width = frame.shape[:2]
    font, pad = _font(max(9, height // 18)), max(2, height // 80)
    lines = [""]
    for word in text.split():
        candidate = f"{lines[-1]} {word}".strip()
        fits = draw.textlength(candidate, font=font) <= width - 2 * pad - 2 * BORDER
        lines[-1:] = [candidate] if fits or not lines[-1] else [lines[-1], word]
    line_height = font.getbbox("Ag")[3] + pad
    top = height - BORDER - len(lines) * line_height - pad
    draw.rectangle((BORDER, top, width - 1 - BORDER, height - 1 - BORDER), fill=(24, 24, 24))
    for i, line in enumerate(lines):
        draw.text((BORDER + pad, top + pad + i * line_height), line, fill=(255, 255, 255), font=font)
    return np.asarray(image)


@lru_cache(maxsize=8)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """Pillow's bundled font at `size` pixels (its bitmap font where Pillow was built without FreeType)."""
    return ImageFont.load_default(size=size)


def tile_grid(frames: np.ndarray) -> np.ndarray:
    """[n, H, W, 3] frames in a near-square grid, [rows·H, cols·W, 3]."""
    n, height, width, _ = frames.shape
    cols = int(np.ceil(np.sqrt(n)))
    rows = int(np.ceil(n / cols))
    grid = np.zeros((rows * height, cols * width, 3), dtype=np.uint8)
    for i, frame in enumerate(frames):
        r, c = divmod(i, cols)
        grid[r * height : (r + 1) * height, c * width : (c + 1) * width] = frame
    return grid
