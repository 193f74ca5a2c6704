"""What every probe of `robustness.py` is built from: a fresh workspace per probe, the `policyforge` CLI run
as a user would run it (a subprocess of the tree under test, with a time limit, optionally a file-size limit), the
record of each run, the files a probe must not lose, and the rules that turn what happened into one class.

Classes, worst first (a probe gets the worst that applies):
  code_execution  the marker file a malicious checkpoint would create appeared
  data_loss       a file policyforge did not create, or committed data, is gone or changed
  traceback       a Python traceback reached the user
  silent          accepted where it should refuse (exit 0), a wrong result without a word, a hang, or a refusal
                  that names none of the field / file / flag at fault (the user is not told what is wrong)
  clear_error     non-zero exit, no traceback, the message names the field / file / flag
  held            the right thing happened (bit-exact resume, fallback with a warning, data intact, ...)
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

CLASSES = ("clear_error", "held", "traceback", "silent", "data_loss", "code_execution")
GOOD = ("clear_error", "held")
TRACEBACK = "Traceback (most recent call last)"
_BOX = "─━│┃┌┐└┘├┤┬┴┼┏┓┗┛┡┩╇┳┻╋ "
DEFAULT_TIMEOUT = 180.0
"""Seconds one CLI run may take before it counts as a hang (generous: the machine may be loaded)."""


@dataclasses.dataclass
class Run:
    """One finished (or killed) subprocess: its command, exit status and output (stdout and stderr together)."""

    argv: list[str]
    returncode: int | None
    """Exit status; negative: killed by that signal; None: it hit its time limit."""
    output: str
    seconds: float

    @property
    def traceback(self) -> bool:
        return TRACEBACK in self.output

    @property
    def text(self) -> str:
        """The output with all whitespace runs collapsed (rich wraps long messages)."""
        return " ".join(self.output.split())

    def names(self, *words: str) -> bool:
        """Whether the output mentions any of `words` (case-insensitive)."""
        text = self.text.lower()
        return any(word.lower() in text for word in words)

    def last_line(self, width: int = 110) -> str:
        lines = [line.strip() for line in self.output.splitlines() if line.strip() and not line.startswith("W1")]
        lines = [line for line in lines if line.strip(_BOX)]  # not a table's borders
        errors = [line for line in lines if "error" in line.lower()]
        prose = [line for line in lines if line[0] not in _BOX]  # after a success: e.g. a table's title
        line = errors[-1] if errors and self.returncode else (prose or lines or [""])[-1]
        return line if len(line) <= width else line[: width - 1] + "…"

    def summary(self) -> str:
        status = "timed out" if self.returncode is None else f"exit {self.returncode}"
        return f"{status} ({self.seconds:.0f} s): {self.last_line()}"


@dataclasses.dataclass
class Verdict:
    """A probe's class and why."""

    cls: str
    detail: str

    def __post_init__(self) -> None:
        assert self.cls in CLASSES, self.cls


@dataclasses.dataclass(frozen=True)
class Probe:
    """One hostile input: `run(ctx)` does what a user would and returns the verdict."""

    name: str
    group: str
    expected: str
    """What the fixed policyforge should do, in the classes' words (e.g. "clear_error", "held")."""
    run: Callable[[Ctx], Verdict]
    needs: tuple[str, ...] = ()
    """Fixtures (names in robustness.FIXTURES) the probe copies."""


def variant(
    name: str, group: str, expected: str, run: Callable[..., Verdict], *args: Any, needs: Sequence[str] = ()
) -> Probe:
    """A probe that runs `run(*args, ctx)`: one of a family of probes sharing their code."""
    return Probe(name, group, expected, functools.partial(run, *args), tuple(needs))


def registrar(probes: list[Probe]) -> Callable:
    """A decorator `probe(name, group, expected, needs=())` that appends the decorated `run(ctx) -> Verdict` to
    `probes` as a Probe."""

    def probe(name: str, group: str, expected: str, needs: tuple[str, ...] = ()) -> Callable:
        def register(run: Callable[[Ctx], Verdict]) -> Callable[[Ctx], Verdict]:
            probes.append(Probe(name, group, expected, run, needs))
            return run

        return register

    return probe


class Ctx:
    """One probe's workspace: a fresh working directory two levels below the probe's own directory (so that a
    `../../x` path stays inside it), the marker a malicious payload would create, and the protected files."""

    def __init__(self, root: Path, tree: Path, fixtures: dict[str, Path], timeout: float = DEFAULT_TIMEOUT):
        self.root, self.tree, self.fixtures, self.timeout = root, tree, fixtures, timeout
        self.work = root / "home" / "work"
        self.work.mkdir(parents=True)
        self.marker = root / "code-ran"
        self.runs: list[Run] = []
        self._protected: dict[Path, str] = {}

    # -- running policyforge ---------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(self.tree), "COLUMNS": "200", "PYTHONUNBUFFERED": "1"}

    def command(self, args: Sequence[str]) -> list[str]:
        return [sys.executable, "-m", "policyforge.cli", *map(str, args)]

    def cli(self, *args: Any, timeout: float | None = None, fsize: int | None = None) -> Run:
        """`policyforge ARGS` in the working directory; `fsize`: a file-size limit in bytes (RLIMIT_FSIZE, with
        SIGXFSZ ignored, so a write past it fails with EFBIG as on a full disk)."""
        return self.execute(self.command(args), timeout, fsize)

    def python(self, code: str, *args: Any, timeout: float | None = None) -> Run:
        """A Python snippet run with the tree under test on the path (fixtures and checks that need its code)."""
        return self.execute([sys.executable, "-c", code, *map(str, args)], timeout)

    def execute(self, argv: list[str], timeout: float | None = None, fsize: int | None = None) -> Run:
        """Run `argv` to its end (SIGKILL on time-out) and record it."""
        return self.collect(self._started(self.popen(argv, fsize)), timeout)

    def popen(self, argv: list[str], fsize: int | None = None) -> subprocess.Popen:
        """Start `argv` in its own process group (so a time-out also stops what it started, e.g. a robot peer)."""
        return subprocess.Popen(
            argv,
            cwd=self.work,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
            preexec_fn=(lambda: _limit_file_size(fsize)) if fsize else None,
        )

    def start(self, *args: Any, fsize: int | None = None) -> subprocess.Popen:
        """`policyforge ARGS` started in the background (to be killed); finish it with `collect`."""
        return self._started(self.popen(self.command(args), fsize))

    @staticmethod
    def _started(process: subprocess.Popen) -> subprocess.Popen:
        process.started = time.monotonic()  # type: ignore[attr-defined]
        return process

    def collect(self, process: subprocess.Popen, timeout: float | None = None) -> Run:
        """Wait for a background run (SIGKILL on time-out) and record it."""
        try:
            output, _ = process.communicate(timeout=timeout or self.timeout)
            returncode = process.returncode
        except subprocess.TimeoutExpired:
            _kill_group(process)
            output, returncode = process.communicate()[0], None
        run = Run(process.args, returncode, output or "", time.monotonic() - process.started)  # type: ignore
        self.runs.append(run)
        return run

    # -- files ------------------------------------------------------------------------------------------

    def copy(self, fixture: str, to: str | Path) -> Path:
        """A private copy of a fixture, at `to` (relative to the working directory)."""
        source, target = self.fixtures[fixture], self.work / to
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            return Path(shutil.copytree(source, target))
        return Path(shutil.copy2(source, target))

    def sentinel(self, path: str | Path, text: str = "user data: policyforge must not touch this\n") -> Path:
        """A file the user owns, protected."""
        path = self.work / path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        self.protect(path)
        return path

    def protect(self, *paths: Path, pattern: str = "**/*") -> None:
        """Record the content of these files (directories: every file matching `pattern` inside) as must-survive."""
        for path in paths:
            for file in path.glob(pattern) if path.is_dir() else [path]:
                if file.is_file():
                    self._protected[file] = digest(file)

    def lost(self) -> list[str]:
        """Protected files that are gone or changed."""
        gone = [f"{_short(p, self.root)} deleted" for p, h in self._protected.items() if not p.is_file()]
        changed = [
            f"{_short(p, self.root)} changed" for p, h in self._protected.items() if p.is_file() and digest(p) != h
        ]
        return gone + changed


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _short(path: Path, root: Path) -> str:
    """`path` relative to the working directory, else to the probe's directory."""
    for base in (root / "home" / "work", root):
        with contextlib.suppress(ValueError):
            return str(path.relative_to(base))
    return str(path)


def _limit_file_size(limit: int) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # ignored dispositions survive exec: writes fail with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def _kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def kill_after(process: subprocess.Popen, seconds: float, until: Callable[[], bool] | None = None) -> bool:
    """SIGKILL `process` (only it, as a crash would) `seconds` after `until()` first holds (default: now);
    False if it ended by itself first."""
    deadline = time.monotonic() + DEFAULT_TIMEOUT
    while until is not None and not until():
        if process.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if process.poll() is not None:
            return False
        time.sleep(0.01)
    if process.poll() is not None:
        return False
    process.send_signal(signal.SIGKILL)
    process.wait()
    return True


# -- verdicts ---------------------------------------------------------------------------------------------


def refused(run: Run, *names: str) -> Verdict:
    """The verdict on a run that should be refused with a message naming one of `names` (field, flag, file)."""
    if run.returncode is None:
        return Verdict("silent", f"hung: no answer after {run.seconds:.0f} s")
    if run.traceback:
        return Verdict("traceback", f"exit {run.returncode} with a traceback: {run.last_line()}")
    if run.returncode == 0:
        return Verdict("silent", "accepted (exit 0)")
    if run.returncode < 0:
        return Verdict("silent", f"died of signal {-run.returncode} without a message")
    if not run.names(*names):
        return Verdict("silent", f"refused (exit {run.returncode}) without naming {names[0]!r}: {run.last_line()}")
    return Verdict("clear_error", f"exit {run.returncode}, names {names[0]!r}")


def worst(ctx: Ctx, verdict: Verdict) -> Verdict:
    """The probe's final class: code execution, lost files and tracebacks in any of its runs outrank the verdict."""
    if ctx.marker.exists():
        return Verdict("code_execution", f"the payload ran: {ctx.marker.name} was created")
    lost = ctx.lost()
    if lost:
        more = f" (+{len(lost) - 3} more)" if len(lost) > 3 else ""
        return Verdict("data_loss", "; ".join(lost[:3]) + more)
    if verdict.cls in GOOD:
        for run in ctx.runs:
            if run.traceback:
                return Verdict("traceback", f"a traceback in `{_argv_name(run.argv)}`: {run.last_line()}")
    return verdict


def _argv_name(argv: Iterable[str]) -> str:
    words = [os.path.basename(str(a)) for a in argv]
    start = words.index("policyforge.cli") + 1 if "policyforge.cli" in words else 1
    return " ".join(words[start : start + 3])


def parse_eval(run: Run) -> dict[str, float]:
    """`policyforge eval` output → {"eval/return": ..., ...}."""
    return {m[1]: float(m[2]) for m in re.finditer(r"(eval/\w+): ([-+0-9.eE]+|nan|inf)", run.output)}


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())
