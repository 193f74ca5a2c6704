"""`arm-instructed`: instructions drawn per episode from the chosen set, held-out sets disjoint from training,
instruction text reported per env (and renewed on auto-reset), success tests that a still arm never passes, a
policy observation without the instruction, and options refused by name."""

import mujoco
import numpy as np
import pytest
import torch

from policyforge.config import ConfigError
from policyforge.sims import SimConfig, make_env, make_task
from policyforge.sims.task import NumpySampler
from policyforge.sims.tasks import instructions as language

SETS = ("train", "heldout_paraphrase", "heldout_combination", "all")


def make(num_envs: int = 8, seed: int = 0, **options):
    return make_env(SimConfig(task="arm-instructed", num_envs=num_envs, task_options=options), seed=seed)


def test_heldout_sets_are_disjoint_from_training_and_their_words_are_all_trained():
    rows = {name: {tuple(row) for row in language.instruction_table(name).tolist()} for name in SETS}
    texts = {name: set(language.texts(name)) for name in SETS}
    for heldout in ("heldout_paraphrase", "heldout_combination"):
        assert rows[heldout] and not rows[heldout] & rows["train"], heldout
        assert texts[heldout] and not texts[heldout] & texts["train"], heldout
        assert rows[heldout] <= rows["all"]
    assert {row[3] for row in rows["heldout_paraphrase"]} == {language.HELDOUT_PARAPHRASE}
    assert language.HELDOUT_PARAPHRASE not in {row[3] for row in rows["train"] | rows["heldout_combination"]}
    combinations = {row[:3] for row in rows["heldout_combination"]}
    assert len(combinations) == len(language.HELDOUT_COMBINATIONS) and not combinations & {r[:3] for r in rows["train"]}
    # every word of a held-out combination is trained, only not in it: the cube in other families; for push and
    # place (with target words) the cube and the target each in this family too
    trained = {row[:3] for row in rows["train"]}
    for family, cube, target in combinations:
        assert any(o == cube and f != family for f, o, _ in trained)
        assert any(f == family and o != cube for f, o, _ in trained)
        if family in (1, 2):
            assert any(f == family and o == cube for f, o, _ in trained)
            assert any(f == family and t == target for f, _, t in trained)
    assert len(rows["all"]) == 5 * (3 + 9 + 9 + 3) and len(texts["all"]) == len(rows["all"])  # one text per row


def test_every_text_parses_back_to_its_ids_and_others_are_refused_by_name():
    for row in language.instruction_table("all").tolist():
        assert language.parse(language.render(*row)) == tuple(row)
    with pytest.raises(ValueError, match="instruction 'lift the pink cube' is not one of"):
        language.parse("lift the pink cube")


@pytest.mark.parametrize("instructions", SETS)
def test_reset_draws_instructions_of_the_chosen_set_with_every_family(instructions):
    env = make(64, instructions=instructions)
    allowed = set(language.texts(instructions))
    seen = set()
    for seed in range(3):
        env.reset(seed=seed)
        texts = env.instructions()
        assert len(texts) == 64 and all(isinstance(text, str) for text in texts)
        assert set(texts) <= allowed
        assert texts == language.render_batch(env.vars)  # the text is the ids' rendering
        seen |= set(env.vars["family"].tolist())
    assert seen == {0, 1, 2, 3}


def test_families_option_restricts_the_families():
    env = make(32, families=["push", "touch"])
    assert set(env.vars["family"].tolist()) == {1, 3}
    assert all(
        text.split()[0] in {"push", "slide", "move", "shove", "go", "reach", "touch"} for text in env.instructions()
    )


def test_instructions_change_on_auto_reset_and_stay_fixed_within_an_episode():
    env = make(8, episode_seconds=3 * 0.04)
    first = env.instructions()
    for _ in range(3):
        assert env.instructions() == first
        *_, info = env.step(torch.zeros(8, 5))
    assert info["episode"]["done"].all()
    second = env.instructions()
    assert sum(a != b for a, b in zip(first, second, strict=True)) >= 6  # 8 fresh draws among 72 texts
    assert second == language.render_batch(env.vars)


def test_objects_start_apart_and_no_instruction_is_done_before_the_arm_moves():
    env = make(64, instructions="all")
    cubes = env.task.cubes(env.state, np)  # [N, 3, 3]
    for a, b in ((0, 1), (0, 2), (1, 2)):  # each cube in its own row and its own column of the grid
        gap = np.abs(cubes[:, a, :2] - cubes[:, b, :2])
        assert gap[:, 0].min() >= 0.07 - 1e-9 and gap[:, 1].min() >= 0.09 - 1e-9
    assert np.allclose(cubes[:, :, 2], 0.02, atol=1e-3)
    pads = env.vars["pads"][:, :, :2]
    assert np.abs(pads[:, :, None] - cubes[:, None, :, :2]).max(axis=-1).min() > 0.07  # pads on free cells
    assert set(env.vars["family"].tolist()) == {0, 1, 2, 3}
    hold = torch.zeros(64, 5)
    hold[:, -1] = 1.0  # the arm keeps still, its gripper open
    for _ in range(env.episode_steps):
        _, reward, _, _, info = env.step(hold)
        assert not info["success"].any()
        assert (reward < 0.5).all()


def test_the_policy_observation_holds_no_instruction_the_critic_does():
    task = make_task("arm-instructed")
    initial = task.reset(NumpySampler(np.random.default_rng(0)), 4, np)
    other = initial._replace(vars={**initial.vars, "family": (initial.vars["family"] + 1) % 4})
    env = make(4)
    obs = env.reset_to(initial)
    obs_other = env.reset_to(other)
    assert env.obs_shapes["policy"] == (22,) and env.task.observation_names() == env.task.proprioception_names()
    assert torch.equal(obs["policy"], obs_other["policy"])
    assert not torch.equal(obs["critic"], obs_other["critic"])
    family_one_hot = obs["critic"][:, 22 + 21 + 9 + 2 : 22 + 21 + 9 + 2 + 4]
    assert torch.equal(family_one_hot.argmax(1), torch.as_tensor(initial.vars["family"]).long())


def test_tasks_without_language_report_no_instructions():
    assert make_env(SimConfig(task="arm-lift-cube", num_envs=2)).instructions() is None


@pytest.mark.parametrize(
    ("options", "path"),
    [
        ({"instructions": "test"}, "sim.task_options.instructions"),
        ({"families": ["stack"]}, r"sim.task_options.families\[0\]"),
        ({"families": []}, "families"),
        ({"families": ["lift", "lift"]}, "families"),
        ({"lift_height": -0.1}, "lift_height"),
        ({"touch_distance": float("nan")}, "touch_distance"),
    ],
)
def test_bad_options_are_refused_by_name(options, path):
    with pytest.raises(ConfigError, match=path):
        make_task("arm-instructed", options)


def test_the_task_camera_looks_at_the_grid():
    """The compiled camera (not only its spec) points from TASK_CAMERA's position at its target: the scene's XML
    orients cameras by xyaxes, which MjSpec prefers over a quaternion set later."""
    from policyforge.sims.tasks.arm_instructed import TASK_CAMERA

    model = make_task("arm-instructed").model
    camera = model.camera("task")
    position, target = (np.array(point) for point in TASK_CAMERA)
    np.testing.assert_allclose(model.cam_pos[camera.id], position)
    rotation = np.zeros(9)
    mujoco.mju_quat2Mat(rotation, model.cam_quat[camera.id])
    looks_along = -rotation.reshape(3, 3)[:, 2]  # a camera looks along its −z
    np.testing.assert_allclose(looks_along, (target - position) / np.linalg.norm(target - position), atol=1e-6)
