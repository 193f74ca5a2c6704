"""policyforge/bench/robustness.py's own logic: how outcomes are classified, and a few cheap probes run through it
end to end."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    from policyforge.bench import robustness

    return robustness


@pytest.fixture
def kit(bench):
    from policyforge.bench import robustness_kit

    return robustness_kit


@pytest.fixture
def ctx(kit, tmp_path):
    return kit.Ctx(tmp_path / "probe", ROOT, {})


def fabricated(kit, returncode, output):
    return kit.Run(["python", "-m", "policyforge.cli", "train"], returncode, output, 1.0)


TRACEBACK = (
    'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: Seed must be between 0 and 2**32 - 1\n'
)


def test_refusals_are_classified_by_exit_status_traceback_and_what_they_name(kit):
    assert (
        kit.refused(fabricated(kit, 2, "error algo.gamma: must be in [0, 1], got -1"), "algo.gamma").cls
        == "clear_error"
    )
    assert kit.refused(fabricated(kit, 1, TRACEBACK), "seed").cls == "traceback"
    assert kit.refused(fabricated(kit, 0, "finished: runs/x"), "algo.gamma").cls == "silent"
    assert kit.refused(fabricated(kit, 2, "error: something went wrong"), "algo.gamma").cls == "silent"
    assert kit.refused(fabricated(kit, None, ""), "algo.gamma").cls == "silent"  # a hang
    assert kit.refused(fabricated(kit, -9, ""), "algo.gamma").cls == "silent"  # killed by a signal, no word


def test_marker_lost_files_and_tracebacks_outrank_the_probes_verdict(kit, ctx):
    held = kit.Verdict("held", "fine")
    assert kit.worst(ctx, held).cls == "held"
    ctx.runs.append(fabricated(kit, 0, TRACEBACK))
    assert kit.worst(ctx, held).cls == "traceback"
    sentinel = ctx.sentinel("notes.txt")
    sentinel.write_text("changed")
    assert kit.worst(ctx, held).cls == "data_loss"
    sentinel.unlink()
    assert "notes.txt deleted" in kit.worst(ctx, held).detail
    ctx.marker.touch()
    assert kit.worst(ctx, held).cls == "code_execution"


def test_a_probe_whose_payload_ran_is_code_execution(bench, kit, tmp_path):
    probe = kit.Probe(
        "payload", "test", "clear_error", lambda ctx: ctx.marker.touch() or kit.Verdict("clear_error", "")
    )
    result = bench.run_probe(probe, tmp_path, ROOT, {}, keep=False)
    assert result.verdict.cls == "code_execution"


def test_summary_counts_bad_as_everything_but_clear_errors_and_held(bench, kit):
    classes = ["clear_error", "held", "held", "traceback", "silent", "data_loss", "code_execution"]
    probe = kit.Probe("p", "test", "held", lambda ctx: None)
    results = [bench.Result(probe, kit.Verdict(cls, ""), "", 0.0) for cls in classes]
    assert bench.summary(results) == {"probes": 7, "clear_or_held": 3, "bad": 4, "data_loss": 1, "code_execution": 1}


def test_a_refused_override_runs_end_to_end_and_prints_the_summary_last(bench, capsys):
    counts = bench.main(["--only", "override without"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert (
        json.loads(last) == counts == {"probes": 1, "clear_or_held": 1, "bad": 0, "data_loss": 0, "code_execution": 0}
    )


def test_a_malicious_checkpoint_is_built_to_run_code_when_unpickled(bench, kit, ctx):
    import pickle

    from policyforge.bench import robustness_runs as probes

    path = probes.hostile_checkpoint(ctx, "evil.pt", "pickle")
    assert not ctx.marker.exists()
    pickle.loads(path.read_bytes())  # what an unsafe loader does
    assert ctx.marker.exists()


def test_the_bench_has_at_least_fifty_probes_with_unique_names(bench):
    names = [probe.name for probe in bench.PROBES]
    assert len(names) >= 50 and len(set(names)) == len(names)
