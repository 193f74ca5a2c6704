"""Real-time settings for a control loop's threads, applied for the loop's duration and undone after:

- CPU affinity (`os.sched_setaffinity`): the threads stay on the CPUs named (no migrations, warm caches);
- SCHED_FIFO (`os.sched_setscheduler`): the kernel runs them before every ordinary (SCHED_OTHER) task the
  moment they wake, instead of sharing the CPU with whatever else is runnable — the setting that keeps a
  500 Hz loop on time on a busy machine. Needs root or CAP_SYS_NICE (or an `rtprio` limit);
- `mlockall(MCL_CURRENT | MCL_FUTURE)` through libc: no page of the process is swapped out or faulted in
  from disk mid-loop. Needs root, CAP_IPC_LOCK or a large enough `memlock` limit;
- the garbage collector frozen (`gc.freeze`) and disabled: no collection pause inside a tick (reference
  counting still frees everything but reference cycles, which wait for the loop's end).

Linux applies affinity and scheduling per thread: each setting is applied to the threads named by their
native ids (the calling thread is 0). What the system does not permit is skipped with one warning that says
what to grant; the loop runs either way.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import gc
import logging
import os
from collections.abc import Iterator

log = logging.getLogger("policyforge.loop")

MCL_CURRENT, MCL_FUTURE = 1, 2
"""mlockall flags (<sys/mman.h>, Linux)."""


@dataclasses.dataclass
class ThreadSetting:
    """One thread's scheduling before the loop, to restore after."""

    tid: int
    """Native thread id (0: the calling thread)."""
    affinity: set[int]
    policy: int
    priority: int


@contextlib.contextmanager
def realtime(
    cpus: tuple[int, ...] | None = None,
    priority: int | None = None,
    lock_memory: bool = False,
    freeze_gc: bool = False,
    threads: tuple[tuple[int, int], ...] = ((0, 0),),
) -> Iterator[list[str]]:
    """Apply the settings while inside; yields the names of those in force ("affinity", "sched_fifo",
    "mlockall", "gc_frozen"). `threads`: (native id, priority offset) of each thread to set — the loop's own
    (0: the caller) at `priority`, helpers it waits on at `priority + offset` (e.g. -1)."""
    applied: list[str] = []
    refused: list[str] = []
    saved = [_thread_setting(tid) for tid, _ in threads]
    gc_was_enabled = gc.isenabled()
    locked = False
    try:
        if cpus is not None:
            _each_thread(threads, lambda tid, _: os.sched_setaffinity(tid, cpus), "affinity", applied, refused)
        if priority is not None:
            set_fifo = lambda tid, offset: os.sched_setscheduler(  # noqa: E731
                tid, os.SCHED_FIFO, os.sched_param(max(1, min(99, priority + offset)))
            )
            _each_thread(threads, set_fifo, "sched_fifo", applied, refused)
        if lock_memory:
            locked = _mlockall(applied, refused)
        if refused:
            log.warning(
                "real-time options not permitted, running without them: %s. Grant them (root, or CAP_SYS_NICE "
                "and CAP_IPC_LOCK, or `rtprio 99` and `memlock unlimited` in /etc/security/limits.conf)",
                "; ".join(refused),
            )
        if freeze_gc:
            gc.collect()  # start clean: what is garbage now is not carried through the loop
            gc.freeze()
            gc.disable()
            applied.append("gc_frozen")
        yield applied
    finally:
        if freeze_gc:
            gc.unfreeze()
            if gc_was_enabled:
                gc.enable()
        if locked:
            ctypes.CDLL(None, use_errno=True).munlockall()
        for setting in saved:
            _restore(setting)


@contextlib.contextmanager
def scheduling_kept(tid: int = 0) -> Iterator[None]:
    """Put the thread's scheduling policy, priority and CPUs back as they were on exit: around calls into libraries
    that raise the calling thread to real-time priority and leave it there (libfranka's control loop does, even with
    RealtimeConfig.Ignore, wherever it is permitted)."""
    saved = _thread_setting(tid)
    try:
        yield
    finally:
        _restore(saved)


def _thread_setting(tid: int) -> ThreadSetting:
    return ThreadSetting(
        tid, os.sched_getaffinity(tid), os.sched_getscheduler(tid), os.sched_getparam(tid).sched_priority
    )


def _restore(setting: ThreadSetting) -> None:
    with contextlib.suppress(OSError):  # the thread may have ended
        os.sched_setscheduler(setting.tid, setting.policy, os.sched_param(setting.priority))
        os.sched_setaffinity(setting.tid, setting.affinity)


def _each_thread(threads, apply, name: str, applied: list[str], refused: list[str]) -> None:
    """`apply(tid, offset)` on every thread; `name` goes to `applied` if all took it, else to `refused`."""
    try:
        for tid, offset in threads:
            apply(tid, offset)
    except OSError as err:
        refused.append(f"{name} ({os.strerror(err.errno)})")
        return
    applied.append(name)


def _mlockall(applied: list[str], refused: list[str]) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mlockall(MCL_CURRENT | MCL_FUTURE) != 0:
        refused.append(f"mlockall ({os.strerror(ctypes.get_errno())})")
        return False
    applied.append("mlockall")
    return True
