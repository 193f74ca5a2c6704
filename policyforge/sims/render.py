"""Offscreen RGB rendering of batched simulations through MuJoCo's renderer (EGL; software Mesa without a GPU)."""

from __future__ import annotations

import atexit
import os
import weakref
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
        if camera is None:
            return 0 if self.cameras else -1
        if camera not in self.cameras:
            raise ValueError(f"unknown camera {camera!r}; this model has {self.cameras}")
        return self.cameras.index(camera)

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


class RendererCache:
    """One `FrameRenderer` per frame size for a model, made on first use (what each backend keeps)."""

    def __init__(self, model: mujoco.MjModel):
        self.model = model
        self._renderers: dict[tuple[int, int], FrameRenderer] = {}

    def get(self, width: int, height: int) -> FrameRenderer:
        key = (width, height)
        if key not in self._renderers:
            self._renderers[key] = FrameRenderer(self.model, width, height)
        return self._renderers[key]

    def close(self) -> None:
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()


_OPEN: weakref.WeakSet[FrameRenderer] = weakref.WeakSet()


def _close_open_renderers() -> None:
    # GL contexts freed by garbage collection during interpreter shutdown raise EGL errors; free them first
    for renderer in list(_OPEN):
        renderer.close()
