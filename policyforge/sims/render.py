"""Offscreen RGB rendering of batched simulations through MuJoCo's renderer (EGL; software Mesa without a GPU)."""

from __future__ import annotations

import atexit
import contextlib
import os
import weakref
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")  # headless by default; must precede the first `import mujoco`

import mujoco
import numpy as np


def pose_before_reset(model: mujoco.MjModel, data: mujoco.MjData, qpos: Any, mocap_pos: Any | None) -> None:
    """Write an env's pose from before its auto-reset (qpos [nq], mocap_pos [nmocap, 3] or None) into `data`, a
    scratch copy of its state, and compute the kinematics and cameras a frame of it needs (mj_forward)."""
    data.qpos[:] = qpos
    if mocap_pos is not None:
        data.mocap_pos[:] = mocap_pos
    mujoco.mj_forward(model, data)


def camera_names(model: mujoco.MjModel) -> list[str]:
    """Names of the model's cameras."""
    return [model.camera(i).name for i in range(model.ncam)]


def camera_id(cameras: list[str], camera: str | None) -> int:
    """Id of `camera` among a model's `cameras` (None: the first, or -1, the free camera, if there is none)."""
    if camera is None:
        return 0 if cameras else -1
    if camera not in cameras:
        raise ValueError(f"unknown camera {camera!r}; this model has {cameras}")
    return cameras.index(camera)


def _ensure_headless_gl() -> None:
    """Use EGL when mujoco was imported before policyforge (so before MUJOCO_GL=egl was set) and there is no
    display: mujoco binds its GL backend at import time and would otherwise try GLFW, which needs X11."""
    from mujoco.rendering.classic import gl_context

    backend = getattr(getattr(gl_context, "GLContext", None), "__module__", "")
    if backend.startswith("mujoco.glfw") and not os.environ.get("DISPLAY"):
        from mujoco import egl

        gl_context.GLContext = egl.GLContext


class FrameRenderer:
    """Renders frames of one model at a fixed size from MjData states; reuse it across calls."""

    def __init__(self, model: mujoco.MjModel, width: int, height: int):
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, width)
        model.vis.global_.offheight = max(model.vis.global_.offheight, height)
        self.model = model
        self.cameras = camera_names(model)
        _ensure_headless_gl()
        self._renderer: mujoco.Renderer | None = mujoco.Renderer(model, height=height, width=width)
        if not _OPEN:
            # registered after mujoco's GL module (imported by the first Renderer) so that it runs first
            atexit.register(_close_open_renderers)
        _OPEN.add(self)

    def camera_id(self, camera: str | None) -> int:
        """Id of `camera` (None: the first camera, or the free camera if the model has none)."""
        return camera_id(self.cameras, camera)

    def render(self, data: mujoco.MjData, camera: str | None = None) -> np.ndarray:
        """One RGB frame [H, W, 3] uint8 of `data` (whose kinematics must be current)."""
        if self._renderer is None:
            raise RuntimeError("this renderer was closed")
        self._renderer.update_scene(data, camera=self.camera_id(camera))
        return self._renderer.render()

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None


@contextlib.contextmanager
def _no_multisampling(model: mujoco.MjModel) -> Iterator[None]:
    """Within the block, `model` asks new GL contexts for no multisampling (MuJoCo reads vis.quality.offsamples
    when a context is made, not per frame)."""
    samples = model.vis.quality.offsamples
    model.vis.quality.offsamples = 0
    try:
        yield
    finally:
        model.vis.quality.offsamples = samples


def fast_scene(scene: mujoco.MjvScene) -> mujoco.MjvScene:
    """`scene` without shadows and reflections: what `quality: fast` leaves out besides multisampling."""
    for flag in (mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION):
        scene.flags[flag] = 0
    return scene


def fast_frame_renderer(model: mujoco.MjModel, width: int, height: int) -> mujoco.Renderer:
    """`mujoco.Renderer` drawing one frame per call with the fast settings: the tiles' reference (tests, benches)."""
    with _no_multisampling(model):
        renderer = mujoco.Renderer(model, height=height, width=width)
    fast_scene(renderer.scene)
    return renderer


class TiledRenderer:
    """Renders many small frames per call, each into its own tile of one offscreen buffer that is read back once,
    without shadows, reflections or multisampling (`ImageConfig.quality` fast).

    On a software (CPU) renderer a 64 px frame costs mostly shadow maps, per-pass set-up and read-back; tiles drop
    the last two to once per batch (`policyforge bench image-throughput`). Shadows stay off: their maps are made for
    the whole buffer's viewport, not per tile."""

    def __init__(self, model: mujoco.MjModel, width: int, height: int):
        self.model, self.width, self.height = model, width, height
        self.cameras = camera_names(model)
        self.columns = max(1, _MAX_BUFFER_SIDE // width)
        self.rows = max(1, _MAX_BUFFER_SIDE // height)
        buffer_width, buffer_height = self.columns * width, self.rows * height
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, buffer_width)
        model.vis.global_.offheight = max(model.vis.global_.offheight, buffer_height)
        _ensure_headless_gl()
        from mujoco.rendering.classic import gl_context

        self._gl: Any = gl_context.GLContext(buffer_width, buffer_height)
        self._gl.make_current()
        with _no_multisampling(model):
            self._context: mujoco.MjrContext | None = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_150)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._context)
        self._scene = fast_scene(mujoco.MjvScene(model, maxgeom=10_000))
        self._option, self._perturb, self._camera = mujoco.MjvOption(), mujoco.MjvPerturb(), mujoco.MjvCamera()
        self._pixels = np.empty((buffer_height, buffer_width, 3), dtype=np.uint8)
        if not _OPEN:
            atexit.register(_close_open_renderers)
        _OPEN.add(self)

    def render(self, states: Iterable[mujoco.MjData], cameras: Sequence[str | None]) -> np.ndarray:
        """Frames [n, V, H, W, 3] uint8 of each state (kinematics current) from each of `cameras` (V of them).

        `states` may yield one scratch MjData refilled per env: each is drawn before the next is taken."""
        views = len(cameras)
        if self._context is None:
            raise RuntimeError("this renderer was closed")
        self._gl.make_current()
        camera_ids = [camera_id(self.cameras, camera) for camera in cameras]
        tiles_per_pass = self.columns * self.rows
        frames: list[np.ndarray] = []
        pending = 0
        for data in states:
            for view_id in camera_ids:
                self._draw(data, view_id, pending)
                pending += 1
                if pending == tiles_per_pass:
                    frames.extend(self._read(pending))
                    pending = 0
        if pending:
            frames.extend(self._read(pending))
        if not frames:
            return np.empty((0, views, self.height, self.width, 3), dtype=np.uint8)
        return np.stack(frames).reshape(len(frames) // views, views, self.height, self.width, 3)

    def _draw(self, data: mujoco.MjData, view_id: int, tile: int) -> None:
        if view_id < 0:
            self._camera.type = mujoco.mjtCamera.mjCAMERA_FREE
            mujoco.mjv_defaultFreeCamera(self.model, self._camera)
        else:
            self._camera.type, self._camera.fixedcamid = mujoco.mjtCamera.mjCAMERA_FIXED, view_id
        mujoco.mjv_updateScene(
            self.model, data, self._option, self._perturb, self._camera, mujoco.mjtCatBit.mjCAT_ALL, self._scene
        )
        row, column = divmod(tile, self.columns)
        # GL's origin is the bottom-left corner: tile row 0 is drawn at the top so that it is read back first
        bottom = (self.rows - 1 - row) * self.height
        viewport = mujoco.MjrRect(column * self.width, bottom, self.width, self.height)
        mujoco.mjr_render(viewport, self._scene, self._context)

    def _read(self, tiles: int) -> list[np.ndarray]:
        used_rows = -(-tiles // self.columns)
        top = self._pixels[: used_rows * self.height]
        bottom = (self.rows - used_rows) * self.height
        rect = mujoco.MjrRect(0, bottom, self.columns * self.width, used_rows * self.height)
        mujoco.mjr_readPixels(top, None, rect, self._context)
        image = np.flipud(top)
        return [
            image[row * self.height : (row + 1) * self.height, column * self.width : (column + 1) * self.width].copy()
            for row, column in (divmod(tile, self.columns) for tile in range(tiles))
        ]

    def close(self) -> None:
        if self._context is not None:
            self._gl.make_current()
            self._context.free()
            self._context = None
            self._gl.free()


class RendererCache:
    """One `FrameRenderer` and one `TiledRenderer` per frame size for a model, made on first use (what each
    backend keeps)."""

    def __init__(self, model: mujoco.MjModel):
        self.model = model
        self._renderers: dict[tuple[int, int], FrameRenderer] = {}
        self._tiled: dict[tuple[int, int], TiledRenderer] = {}

    def get(self, width: int, height: int) -> FrameRenderer:
        key = (width, height)
        if key not in self._renderers:
            self._renderers[key] = FrameRenderer(self.model, width, height)
        return self._renderers[key]

    def tiled(self, width: int, height: int) -> TiledRenderer:
        key = (width, height)
        if key not in self._tiled:
            self._tiled[key] = TiledRenderer(self.model, width, height)
        return self._tiled[key]

    def close(self) -> None:
        for renderer in [*self._renderers.values(), *self._tiled.values()]:
            renderer.close()
        self._renderers.clear()
        self._tiled.clear()


_MAX_BUFFER_SIDE = 1024
"""Side, pixels, of a tiled renderer's offscreen buffer: 256 tiles of 64 px per read-back."""

_OPEN: weakref.WeakSet[FrameRenderer | TiledRenderer] = weakref.WeakSet()


def _close_open_renderers() -> None:
    # GL contexts freed by garbage collection during interpreter shutdown raise EGL errors; free them first
    for renderer in list(_OPEN):
        renderer.close()
