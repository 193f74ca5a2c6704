"""The README's journeys, run verbatim on a clean clone: each command's wall time and the figures it printed against
the figures the README promises next to it.

    python bench/readme_journeys.py [--journeys setup 1 2 3 4] [--workdir DIR] [--list]

Every fenced `bash` / `python` block of the README's "Set-up" and "Journeys" sections is run as written, from the
root of a fresh `git clone` of this checkout (`--workdir DIR/policyforge`; an existing clone there is reused, so a
long walk can be split across invocations: `--journeys setup 1`, then `--journeys 2 3 4`). Bash lines run one by one
(`\\` continuations joined) through `bash -c`; a python block runs as one script with `.venv/bin/python`.

A promise is a bracket at the end of a command's comment, items separated by " · ":

    .venv/bin/policyforge train configs/x.yaml   # what it does [eval success 90–100% · export error ≤ 1e-5 · 5 min]

An item is `FIGURE LOW–HIGH UNIT`, `FIGURE ≤ X UNIT`, `FIGURE ≥ X UNIT` or `FIGURE X UNIT` for one of `FIGURES`
(read from the command's output: its last match), `exit N` (the status the command should end with, when not
0: a refusal the README shows on purpose), or a duration (`5 min`, `40 s`: how long it takes here; reported
beside the measured time, not counted as a promise). A promise mismatch is a figure outside its range, or one the
command never printed. Not run, and said so: the lines after a `# on hardware` comment in a block (no robot here),
`make test` (CI runs it); a server (`tensorboard`) passes when it announces its address within a minute.

Prints a table; the last line is JSON {"commands", "failed", "promise_mismatch", "minutes", "skipped",
"slower_than_stated"} (commands: those run; slower_than_stated: took over twice the stated time).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

# figure → (pattern whose first group is the value, in the output of the command that prints it)
FIGURES: dict[str, str] = {
    "eval success": r"eval/success[\s:│|]+(\d+(?:\.\d+)?)%",  # train's final table, `eval`
    "eval return": r"eval/return[\s:│|]+(-?[\d,]*\.?\d+)",
    "demonstration success": r"wrote \d+ episodes \(.*?success (\d+(?:\.\d+)?)%",  # collect
    "export error": r"max \|exported − act\| = ([-+.\deE]+)",
    "teacher success": r"│\s*teacher\s*│\s*(\d+(?:\.\d+)?)%",  # distill's comparison table
    "student success": r"│\s*student\s*│\s*(\d+(?:\.\d+)?)%",
    "distance to goal": r"final distance to the goal (\d+(?:\.\d+)?) cm",  # deploy, an arm
    "success accuracy": r"eval/success_accuracy[\s:│|]+(\d+(?:\.\d+)?)",  # a reward model's train
    "progress rank corr": r"eval/progress_rank_corr[\s:│|]+(-?\d+(?:\.\d+)?)",
    "reward model progress": r"reward model: progress[\s│|]+[\d.]+ → (\d+(?:\.\d+)?)",  # deploy --reward-model
    "speed error": r"error (\d+(?:\.\d+)?) m/s linear",  # deploy, the Go2
    "unsafe commands": r'"unsafe_commands_reaching_peer": (\d+)',  # bench safety-fuzz
    "faults handled": r'"faults_handled": (\d+)',
    "p99 jitter": r'"p99_jitter_ms": (\d+(?:\.\d+)?)',  # bench control-loop, loaded with real-time options
}
SERVERS = {"tensorboard": "http://"}  # a command that serves until stopped → the text announcing its address
NOT_RUN = {"make test": "the test suite: .ci/run runs it"}
HARDWARE = re.compile(r"^#\s*on hardware")
DURATION = re.compile(r"^~?(\d+(?:\.\d+)?)\s*(min|s)$")
EXIT = re.compile(r"^exit (\d+)\b")  # a command expected to end with this status (e.g. a refusal), with the reason
NUMBER = r"[-+]?\d*\.?\d+(?:e[-+]?\d+)?"
RANGE = re.compile(
    rf"^(?P<figure>[a-z0-9 ]+?)\s+(?:(?P<low>{NUMBER})\s*–\s*(?P<high>{NUMBER})|(?P<op>[≤≥])\s*(?P<bound>{NUMBER})"
    rf"|(?P<exact>{NUMBER}))\s*(?P<unit>%|cm|m/s|ms)?$"
)


@dataclass
class Promise:
    figure: str
    low: float
    high: float
    unit: str

    def text(self) -> str:
        if self.low == self.high:
            return f"{self.figure} {self.low:g}{self.unit}"
        if self.low == -float("inf"):
            return f"{self.figure} ≤ {self.high:g}{self.unit}"
        if self.high == float("inf"):
            return f"{self.figure} ≥ {self.low:g}{self.unit}"
        return f"{self.figure} {self.low:g}–{self.high:g}{self.unit}"


@dataclass
class Command:
    journey: str
    text: str
    language: str = "bash"
    promises: list[Promise] = field(default_factory=list)
    stated_s: float | None = None
    skip: str | None = None
    exit_status: int = 0


@dataclass
class Outcome:
    command: Command
    seconds: float = 0.0
    returncode: int | None = None
    printed: dict[str, float | None] = field(default_factory=dict)
    log: Path | None = None

    @property
    def failed(self) -> bool:
        return self.returncode != self.command.exit_status

    def mismatches(self) -> list[str]:
        bad = []
        for promise in self.command.promises:
            value = self.printed.get(promise.figure)
            if value is None:
                bad.append(f"{promise.figure}: not printed")
            elif not promise.low <= value <= promise.high:
                bad.append(f"{promise.figure} {value:g}{promise.unit} outside {promise.text()}")
        return bad


def parse_promises(comment: str) -> tuple[list[Promise], float | None, int]:
    """The promises, the stated duration (seconds) and exit status in a command's comment's trailing `[...]`."""
    match = re.search(r"\[([^\[\]]+)\]\s*$", comment)
    if not match:
        return [], None, 0
    promises, stated, status = [], None, 0
    for item in (part.strip() for part in match.group(1).split("·")):
        if duration := DURATION.match(item):
            stated = float(duration.group(1)) * (60 if duration.group(2) == "min" else 1)
            continue
        if code := EXIT.match(item):
            status = int(code.group(1))
            continue
        found = RANGE.match(item)
        if not found or found["figure"] not in FIGURES:
            raise ValueError(f"README promise {item!r}: not `FIGURE RANGE` for a figure of {sorted(FIGURES)}")
        unit = found["unit"] or ""
        if found["exact"] is not None:
            low = high = float(found["exact"])
        elif found["op"]:
            bound = float(found["bound"])
            low, high = (-float("inf"), bound) if found["op"] == "≤" else (bound, float("inf"))
        else:
            low, high = float(found["low"]), float(found["high"])
        promises.append(Promise(found["figure"], low, high, unit))
    return promises, stated, status


def _split_comment(line: str) -> tuple[str, str]:
    """(command, comment) of a bash line: the comment starts at the first `#` after whitespace, outside quotes."""
    quote = None
    for i, char in enumerate(line):
        if char in "'\"" and quote in (None, char):
            quote = None if quote else char
        elif char == "#" and quote is None and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1 :].strip()
    return line.rstrip(), ""


def bash_commands(block: str, journey: str) -> list[Command]:
    commands, hardware, pending = [], False, ""
    for raw in block.splitlines():
        if pending:
            raw = pending + " " + raw.strip()
            pending = ""
        if raw.rstrip().endswith("\\") and not raw.lstrip().startswith("#"):
            pending = raw.rstrip()[:-1].rstrip()
            continue
        code, comment = _split_comment(raw)
        if not code:
            hardware = hardware or bool(HARDWARE.match(raw.strip()))
            continue
        promises, stated, status = parse_promises(comment)
        command = Command(journey, raw.strip(), "bash", promises, stated, exit_status=status)
        if hardware:
            command.skip = "needs the robot (no hardware here)"
        command.skip = next((why for start, why in NOT_RUN.items() if code.strip() == start), command.skip)
        commands.append(command)
    return commands


def extract(readme: str) -> list[Command]:
    """The commands of the README's "Set-up" (journey "setup") and "Journeys" sections, in order."""
    commands = []
    for section in re.split(r"^## ", readme, flags=re.M):
        title = section.split("\n", 1)[0]
        if not (title.startswith("Set-up") or title.startswith("Journeys")):
            continue
        journey = "setup" if title.startswith("Set-up") else "?"
        pattern = r"^\*\*(\d+)\.|^```(bash|python)\n(.*?)^```"
        for match in re.finditer(pattern, section, flags=re.M | re.S):
            if match.group(1):
                journey = match.group(1)
            elif match.group(2) == "bash":
                commands += bash_commands(match.group(3), journey)
            else:
                commands.append(Command(journey, match.group(3), "python"))
    return commands


def read_figures(output: str) -> dict[str, float | None]:
    figures: dict[str, float | None] = {}
    for name, pattern in FIGURES.items():
        found = re.findall(pattern, output)
        figures[name] = float(found[-1].replace(",", "")) if found else None
    return figures


def run(command: Command, clone: Path, log: Path, timeout_s: float) -> Outcome:
    env = {**os.environ, "COLUMNS": "200", "PYTHONUNBUFFERED": "1"}
    outcome = Outcome(command, log=log)
    start = time.perf_counter()
    with log.open("w") as out:
        out.write(f"$ {command.text}\n")
        out.flush()
        if command.language == "python":
            script = log.with_suffix(".py")
            script.write_text(command.text)
            argv = [str(clone / ".venv/bin/python"), str(script)]
        else:
            argv = ["bash", "-c", command.text]
        process = subprocess.Popen(argv, cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        server = next((ready for name, ready in SERVERS.items() if name in command.text.split("#")[0]), None)
        outcome.returncode = _wait_server(process, log, ready=server) if server else _wait(process, timeout_s)
    outcome.seconds = time.perf_counter() - start
    outcome.printed = read_figures(log.read_text(errors="replace"))
    return outcome


def _wait(process: subprocess.Popen, timeout_s: float) -> int:
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return 124


def _wait_server(process: subprocess.Popen, log: Path, ready: str, within_s: float = 60) -> int:
    """0 when the server announced its address within `within_s` (then it is stopped), else its exit code or 1."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and process.poll() is None:
        if ready in log.read_text(errors="replace"):
            process.terminate()
            process.wait(timeout=30)
            return 0
        time.sleep(0.5)
    if process.poll() is None:
        process.kill()
        process.wait()
        return 1
    return process.returncode or 1


def clone_into(workdir: Path, source: Path) -> Path:
    clone = workdir / "policyforge"
    if not (clone / ".git").is_dir():
        subprocess.run(["git", "clone", "-q", str(source), str(clone)], check=True)
    return clone


def report(outcomes: list[Outcome], skipped: list[Command], console: Console) -> dict:
    table = Table(title="README journeys, run verbatim")
    for column in ("journey", "command", "exit", "min (stated)", "promised", "printed", "ok"):
        table.add_column(column, overflow="fold")
    for o in outcomes:
        c = o.command
        stated = f" ({c.stated_s / 60:.1f})" if c.stated_s else ""
        printed = ", ".join(f"{p.figure} {o.printed.get(p.figure, None)}" for p in c.promises)
        ok = not o.failed and not o.mismatches()
        verdict = "yes" if ok else "NO: " + "; ".join([*(["exit"] if o.failed else []), *o.mismatches()])
        cells = (c.journey, c.text.split("  #")[0][:90], str(o.returncode), f"{o.seconds / 60:.1f}{stated}",
                 ", ".join(p.text() for p in c.promises), printed, verdict)  # fmt: skip
        table.add_row(*map(Text, cells))
    for c in skipped:
        table.add_row(*map(Text, (c.journey, c.text.split("  #")[0][:90], "-", "-", "", "", f"not run: {c.skip}")))
    console.print(table)
    return {
        "commands": len(outcomes),
        "failed": sum(o.failed for o in outcomes),
        "promise_mismatch": sum(bool(o.mismatches()) for o in outcomes),
        "minutes": round(sum(o.seconds for o in outcomes) / 60, 1),
        "skipped": len(skipped),
        "slower_than_stated": sum(bool(o.command.stated_s and o.seconds > 2 * o.command.stated_s) for o in outcomes),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--journeys", nargs="+", default=None, help="setup and/or journey numbers (default: all)")
    parser.add_argument("--workdir", type=Path, default=None, help="where the clone goes (default: a new temp dir)")
    parser.add_argument("--source", type=Path, default=Path(__file__).resolve().parents[1], help="repo to clone")
    parser.add_argument("--list", action="store_true", help="print the commands and their promises; run nothing")
    parser.add_argument("--timeout-min", type=float, default=120, help="per command (or 4× its stated time if longer)")
    args = parser.parse_args(argv)
    console = Console(width=200)

    def chosen_in(readme: Path) -> list[Command]:
        return [c for c in extract(readme.read_text()) if args.journeys is None or c.journey in args.journeys]

    if args.list:
        chosen = chosen_in(args.source / "README.md")
        for c in chosen:
            promised = " · ".join(p.text() for p in c.promises)
            skip = f" (not run: {c.skip})" if c.skip else ""
            console.print(f"[{c.journey}] {c.text}\n    → {promised or '-'}{skip}", markup=False, highlight=False)
        return {}
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="readme-journeys-"))
    clone = clone_into(workdir, args.source)
    chosen = chosen_in(clone / "README.md")  # the committed README, as a new user gets it
    logs = workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    console.print(f"clone: {clone}; logs: {logs}")
    outcomes, skipped = [], []
    for i, command in enumerate(chosen):
        if command.skip:
            skipped.append(command)
            continue
        timeout_s = max(4 * (command.stated_s or 0), 60 * args.timeout_min)  # a hang, not a slow machine
        log = logs / f"{len(list(logs.glob('*.log'))):03d}-journey-{command.journey}.log"
        console.print(f"[{i + 1}/{len(chosen)}] {command.text.splitlines()[0][:150]}", markup=False, highlight=False)
        outcomes.append(run(command, clone, log, timeout_s))
        o = outcomes[-1]
        console.print(
            f"    exit {o.returncode} in {o.seconds / 60:.1f} min; {'; '.join(o.mismatches()) or 'as promised'}"
        )
    result = report(outcomes, skipped, console)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    summary = main()
    sys.exit(1 if summary.get("failed") or summary.get("promise_mismatch") else 0)
