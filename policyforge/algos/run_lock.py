"""One process trains a run at a time: an exclusive `flock` on RUN_DIR/train.lock, which the kernel releases when
the holder ends, however it ends (SIGKILL included), so a lock never outlives its process."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from policyforge.errors import UserError

LOCK_FILE = "train.lock"


class RunLockedError(UserError):
    """Another process is training (or resuming) the run."""


class RunLock:
    """Held from construction until `release()` (or the end of the process); the file holds the holder's PID."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            raise RunLockedError(
                f"{self.path.parent} is being trained by process {holder or '(starting)'}, which holds {self.path}; "
                "wait for it to finish or stop it, then resume the run"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        """Let another process train the run (closing the file releases the lock)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
