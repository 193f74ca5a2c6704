"""bench/distill_table.py's runs: the students of a family differ only in their algorithm (PPO alone keeps only
PPO's settings, renders nothing and learns from the sparse or the dense reward), and the env steps to reach the
teacher come from the run's evaluations."""

import argparse
import json
from pathlib import Path

from policyforge import config as config_io
from policyforge.algos.runner import RunConfig
from policyforge.bench.distill_table import STUDENTS, steps_to, student_config


def test_a_familys_students_differ_only_in_their_algorithm(tmp_path):
    teacher = tmp_path / "vla-bc"
    teacher.mkdir()
    config_io.save(config_io.load(RunConfig, "configs/vla-bc.yaml"), teacher / "config.yaml")  # no reward_type
    args = argparse.Namespace(teacher=teacher, steps=51_200, eval_every=12_800, out=tmp_path / "table")
    configs = {method: student_config(args, "touch", method, seed=2) for method in STUDENTS}
    assert {m: (c.algo.tag, getattr(c.algo, "mode", None)) for m, c in configs.items()} == {
        "bc": ("distill", "bc"), "dagger": ("distill", "dagger"), "rpd": ("distill", "rpd"),
        "ppo_only": ("ppo", None), "ppo_only_dense": ("ppo", None),
    }  # fmt: skip
    for method, config in configs.items():
        assert config.sim.task_options["families"] == ["touch"] and config.seed == 2
        assert (
            config.runner.total_env_steps == 51_200
            and config.run_dir == tmp_path / "table" / "runs" / f"touch-{method}-s2"
        )
        assert config_io.to_dict(config.policy) == config_io.to_dict(configs["rpd"].policy)
    rewards = {method: config.sim.task_options["reward_type"] for method, config in configs.items()}
    assert rewards == {**dict.fromkeys(["bc", "dagger", "rpd", "ppo_only_dense"], "dense"), "ppo_only": "sparse"}
    assert configs["rpd"].algo.teacher == str(teacher) and configs["rpd"].sim.image.cameras == ["task", "wrist"]
    assert configs["ppo_only"].sim.image.cameras == configs["ppo_only_dense"].sim.image.cameras == []
    assert configs["ppo_only"].algo.actor_lr == configs["rpd"].algo.actor_lr
    assert configs["rpd"].policy.init_std == 0.5 and configs["rpd"].algo.distill_coef == 5  # the recipe's


def test_steps_to_the_teachers_success_read_from_the_evaluations(tmp_path):
    records = [{"env_steps": 100, "eval/success": 0.1}, {"env_steps": 150}, {"env_steps": 200, "eval/success": 0.3}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert steps_to(tmp_path, 0.25) == 200
    assert steps_to(tmp_path, 0.1) == 100
    assert steps_to(tmp_path, 0.5) is None
    assert steps_to(Path(tmp_path / "none"), 0.1) is None
