"""Ctrl-C (SIGINT) while a run trains: the first asks the run to stop at the end of its iteration, save a checkpoint
and say how to resume; a second stops at once, without saving, except while a checkpoint is being written, which
always finishes first (checkpoint writes are atomic, and nothing is left half-written either way)."""

from __future__ import annotations

import contextlib
import shlex
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

INTERRUPT_EXIT = 130
"""Exit status of a command stopped by Ctrl-C (128 + SIGINT, as a shell reports it)."""


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped on Ctrl-C; the message says what was saved and the command that resumes the run."""


def resume_command(run_dir: Path) -> str:
    """The command that continues the run in `run_dir` from its newest checkpoint."""
    return f"policyforge train --resume {shlex.quote(str(run_dir))}"


class StopRequests:
    """Counts Ctrl-Cs while `installed` (in the main thread; elsewhere signals stay Python's): the first prints
    `notice` and sets `requested` for the training loop to see; a later one raises KeyboardInterrupt, unless
    inside `deferred()` (a checkpoint being written), where it only counts."""

    def __init__(self, say: Callable[[str], None]):
        self.say = say
        self.notice = "Ctrl-C: stopping at the end of this iteration to save a checkpoint (Ctrl-C again: stop now)"
        """What the first Ctrl-C prints (the runner rewords it for the final evaluation)."""
        self.count = 0
        self._deferring = 0

    @property
    def requested(self) -> bool:
        return self.count > 0

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopRequests]:
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = signal.signal(signal.SIGINT, self._handle)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Ctrl-C inside only counts: what is being written is finished first."""
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self._deferring:
            self.say("Ctrl-C: a checkpoint is being written; it finishes first")
        elif self.count == 1:
            self.say(self.notice)
        else:
            raise KeyboardInterrupt
