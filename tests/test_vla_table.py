"""bench/vla_table.py's figures from known per-seed results: means over seeds and sets, and its last line's keys."""

import argparse
import json

import pytest

from policyforge.bench.vla_table import SETS, kept, mean_over_seeds, sizes, summary_json


def _seed(bc: float, rl: float, paraphrase_gap: float) -> dict:
    def stage(success: float) -> dict:
        rates = {"train": success, "heldout_paraphrase": success - paraphrase_gap, "heldout_combination": success / 2}
        return {name: {"overall": rate, "lift": rate, "touch": 1.0} for name, rate in rates.items()}

    return {"bc": stage(bc), "rl": stage(rl), "bc_wall_s": 10.0, "rl_wall_s": 20.0, "env_steps": 512}


def test_the_table_averages_seeds_and_sets_and_its_json_has_the_issue_keys():
    runs = [_seed(0.4, 0.8, 0.1), _seed(0.6, 1.0, 0.0)]
    del runs[1]["rl"]["train"]["touch"]  # its evaluation drew no touch instruction: the mean is seed 0's
    runs[0]["rl"]["train"]["touch"] = 0.5
    means = mean_over_seeds(runs)
    assert means["rl"]["train"]["overall"] == pytest.approx(0.9)
    assert means["rl"]["heldout_paraphrase"]["overall"] == pytest.approx(0.85)
    assert means["bc"]["overall"]["overall"] == pytest.approx((0.5 + 0.45 + 0.25) / 3)
    result = summary_json(means, runs, speedup=4.5, demo_success=0.9, seeds=[0, 1])
    issue_keys = {"bc_success", "rl_success", "heldout_paraphrase_success", "seen_success", "prefix_cache_speedup"}
    assert issue_keys <= set(result)
    assert result["seen_success"] == 0.9 and result["heldout_paraphrase_success"] == 0.85
    assert result["rl_success"] == round((0.9 + 0.85 + 0.45) / 3, 3)
    assert result["per_family"]["rl"] == {"lift": 0.9, "touch": 0.5}
    assert {f"bc_{name}_success" for name in SETS} <= set(result)
    assert result["wall_s"] == 30.0


def test_a_seed_is_taken_from_an_earlier_invocation_only_at_the_same_sizes(tmp_path):
    args = argparse.Namespace(
        episodes=400, bc_steps=3000, steps=102_400, eval_envs=32, image_size=64, episode_seconds=None, dataset=None
    )
    run = _seed(0.2, 0.5, 0.0) | {"sizes": sizes(args)}
    (tmp_path / "seed1.json").write_text(json.dumps(run))
    assert kept(tmp_path, 1, args) == run
    assert kept(tmp_path, 2, args) is None  # never run
    args.bc_steps = 6000  # results of other sizes are not this table's
    assert kept(tmp_path, 1, args) is None
