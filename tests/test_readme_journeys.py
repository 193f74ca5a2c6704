"""bench/readme_journeys.py: the README's journey commands carry promises the bench can check, and the bench counts a
figure outside its promise, a figure never printed and a failed command."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("readme_journeys", ROOT / "bench" / "readme_journeys.py")
journeys = sys.modules["readme_journeys"] = importlib.util.module_from_spec(_spec)  # dataclasses look it up there
_spec.loader.exec_module(journeys)

RESULT_COMMANDS = ("policyforge train", "policyforge collect", "policyforge eval", "policyforge export", "deploy")
RESULT_COMMANDS += ("policyforge distill",)


def test_every_journey_command_that_gives_a_result_states_it_and_its_duration():
    commands = journeys.extract((ROOT / "README.md").read_text())
    assert {c.journey for c in commands} == {"setup", "1", "2", "3", "4", "5", "6", "7"}
    run = [c for c in commands if not c.skip]
    for command in run:
        code = command.text.split("  #")[0]
        if command.language == "bash":
            assert code.startswith((".venv/bin/", "make ")), f"not runnable on a fresh clone as written: {code}"
        if any(word in code for word in RESULT_COMMANDS) and command.exit_status == 0:
            assert command.promises and command.stated_s, f"no promise or duration: {command.text}"
    skipped = {c.skip for c in commands if c.skip}
    assert skipped == {"needs the robot (no hardware here)", "the test suite: .ci/run runs it"}
    hardware = [c.text for c in commands if c.skip and "robot" in c.skip]
    assert len(hardware) == 2 and all("--peer" not in text for text in hardware)
    joined = [c for c in commands if "name=lift-30-flow-bc" in c.text]
    assert len(joined) == 1 and "\\" not in joined[0].text and joined[0].promises  # a continued line is one command


def test_promises_parse_ranges_bounds_exit_status_and_durations():
    promises, stated, status = journeys.parse_promises(
        "rectified flow [eval success 94–100% · export error ≤ 1e-5 · 6 min]"
    )
    assert [(p.figure, p.low, p.high, p.unit) for p in promises] == [
        ("eval success", 94, 100, "%"),
        ("export error", -float("inf"), 1e-5, ""),
    ]
    assert stated == 360 and status == 0
    promises, stated, status = journeys.parse_promises("finished runs say so [exit 2 · unsafe commands 0 · 40 s]")
    assert status == 2 and stated == 40 and (promises[0].low, promises[0].high) == (0, 0)
    assert journeys.parse_promises("a comment with no promise") == ([], None, 0)
    with pytest.raises(ValueError, match="'eval sucess 90–100%'"):
        journeys.parse_promises("[eval sucess 90–100%]")  # a misspelt figure is never silently unchecked


def test_figures_are_read_from_what_the_commands_print():
    table = "│ eval/return  │ 40.11 │\n│ eval/success │ 98%   │\n"
    printed = journeys.read_figures("progress success 50%\n" + table + "max |exported − act| = 6.00e-07")
    assert printed["eval success"] == 98 and printed["eval return"] == 40.11 and printed["export error"] == 6e-7
    verdict = "VERDICT: not reached: final distance to the goal 13.2 cm, outside the task's 5 cm"
    assert journeys.read_figures(verdict)["distance to goal"] == 13.2
    assert journeys.read_figures("eval/return: -1,204.5")["eval return"] == -1204.5
    compared = journeys.read_figures("│ teacher │ 25%     │ 1.0 │\n│ student │ 50%     │ 2.0 │")
    assert compared["teacher success"] == 25 and compared["student success"] == 50  # policyforge distill's table


def test_the_bench_counts_failures_and_promise_mismatches_on_a_clean_clone(tmp_path):
    source = tmp_path / "repo"
    source.mkdir()
    (source / "README.md").write_text(
        "# x\n\n## Set-up\n\n```bash\nmake test   # CI\n```\n\n## Journeys\n\n**1. One.**\n\n```bash\n"
        "echo 'eval/success: 96%'   # kept [eval success 90–100% · 1 s]\n"
        "echo 'eval/success: 88%'   # broken promise [eval success 90–100%]\n"
        "echo 'nothing' \\\n  && false   # fails [exit 0]\n"
        "ls README.md   # runs in the clone, not here\n"
        "# on hardware\n"
        "echo robot   # skipped\n```\n\n**2. Two.**\n\n```python\nprint('eval/success: 100%')\n```\n\n## Other\n"
    )
    subprocess.run(["git", "init", "-q", str(source)], check=True)
    subprocess.run(["git", "-C", str(source), "add", "."], check=True)
    git_user = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", *git_user, "-C", str(source), "commit", "-qm", "x"], check=True)
    (source / "README.md").write_text("uncommitted edits are not what a clean clone sees")

    summary = journeys.main(["--source", str(source), "--workdir", str(tmp_path / "work"), "--journeys", "setup", "1"])
    assert summary == {
        "commands": 4, "failed": 1, "promise_mismatch": 1, "minutes": 0.0, "skipped": 2, "slower_than_stated": 0,
    }  # fmt: skip
    logs = sorted((tmp_path / "work" / "logs").glob("*.log"))
    assert len(logs) == 4 and "README.md" in logs[3].read_text()
