"""Batched rotation math over an array namespace `xp`. Quaternions are MuJoCo's (w, x, y, z), [N, 4]."""

from __future__ import annotations

from policyforge.sims.task import Array, Xp


def quat_mul(a: Array, b: Array, xp: Xp) -> Array:
    """Hamilton product a ⊗ b, [N, 4]."""
    aw, ax, ay, az = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
    bw, bx, by, bz = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    return xp.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        axis=-1,
    )


def quat_conj(q: Array, xp: Xp) -> Array:
    """Conjugate (inverse of a unit quaternion), [N, 4]."""
    return xp.concatenate([q[..., :1], -q[..., 1:]], axis=-1)


def cross(a: Array, b: Array, xp: Xp) -> Array:
    """Cross products of [N, 3] vectors (written out: numpy's cross is slow on small batches)."""
    ax, ay, az = a[..., 0], a[..., 1], a[..., 2]
    bx, by, bz = b[..., 0], b[..., 1], b[..., 2]
    return xp.stack([ay * bz - az * by, az * bx - ax * bz, ax * by - ay * bx], axis=-1)


def quat_rotate(q: Array, v: Array, xp: Xp) -> Array:
    """Rotate vectors v [N, 3] by unit quaternions q [N, 4]: R(q) v."""
    w, u = q[..., :1], q[..., 1:]
    t = 2.0 * cross(u, v, xp)
    return v + w * t + cross(u, t, xp)


def quat_rotate_inverse(q: Array, v: Array, xp: Xp) -> Array:
    """Express world vectors v [N, 3] in the frame of q: R(q)ᵀ v."""
    return quat_rotate(quat_conj(q, xp), v, xp)


def projected_gravity(q: Array, xp: Xp) -> Array:
    """World down (0, 0, -1) in the frames of unit quaternions q [N, 4]: −R(q)ᵀ e_z, written out."""
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return xp.stack([2 * (w * y - x * z), -2 * (y * z + w * x), 2 * (x * x + y * y) - 1], axis=-1)


def quat_to_axis_angle(q: Array, xp: Xp) -> Array:
    """Rotation vector (axis · angle, angle in [0, π]) of unit quaternions, [N, 3]."""
    q = q * xp.where(q[..., :1] < 0, -1.0, 1.0)  # shortest rotation
    sin_half = xp.linalg.norm(q[..., 1:], axis=-1, keepdims=True)
    angle = 2.0 * xp.arctan2(sin_half, q[..., :1])
    # angle / sin(angle/2) -> 2 as the angle -> 0
    scale = xp.where(sin_half > 1e-9, angle / xp.maximum(sin_half, 1e-9), 2.0)
    return q[..., 1:] * scale


def quat_from_rotation_vector(rotation: Array, xp: Xp) -> Array:
    """Unit quaternions [N, 4] of rotation vectors [N, 3] (axis · angle)."""
    angle = xp.linalg.norm(rotation, axis=-1, keepdims=True)
    # sin(angle/2)/angle -> 1/2 as the angle -> 0
    scale = xp.where(angle > 1e-9, xp.sin(angle / 2) / xp.maximum(angle, 1e-9), 0.5)
    return xp.concatenate([xp.cos(angle / 2), rotation * scale], axis=-1)


def yaw_quat(yaw: Array, xp: Xp) -> Array:
    """Quaternions of rotations by yaw [N] about world z, [N, 4]."""
    zeros = xp.zeros_like(yaw)
    return xp.stack([xp.cos(yaw / 2), zeros, zeros, xp.sin(yaw / 2)], axis=-1)


def wrap_angle(angle: Array, xp: Xp) -> Array:
    """Angles wrapped into [-π, π)."""
    return (angle + xp.pi) % (2 * xp.pi) - xp.pi
