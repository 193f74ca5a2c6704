"""policyforge/bench/vla_probe.py: breaking an input the policy reads raises its loss, breaking one it ignores does
not, and the object word swap names another cube in the same words."""

import numpy as np
import torch

from policyforge.bench import vla_probe
from policyforge.data.dataset import Demonstrations, DemoWriter
from tests.policies.test_vla import tiny_vla


def test_the_object_word_swap_names_the_next_cube_in_the_same_words():
    assert vla_probe.swap_object_words("put the red cube on the blue pad") == "put the green cube on the red pad"
    assert vla_probe.swap_object_words("lift the blue block") == "lift the red block"
    assert vla_probe.swap_object_words("touch the reddish cube") == "touch the reddish cube"  # whole words only


def test_probes_tell_a_used_input_from_an_ignored_one(tmp_path):
    writer = DemoWriter(tmp_path / "demos", 25, 5, 3, ["task", "wrist"], (32, 32), "arm-instructed", env_state_dim=4)
    generator = np.random.default_rng(0)
    said = ["lift the red cube", "push the blue cube to the left zone"]
    for episode in range(4):
        images = {c: generator.integers(0, 256, (6, 32, 32, 3), dtype=np.uint8) for c in ("task", "wrist")}
        rest = (np.zeros(6), np.arange(6) == 5, np.zeros(6, bool))
        actions = np.full((6, 3), 0.8 if episode % 2 else -0.8)  # the instruction alone says which
        writer.add_episode(np.zeros((6, 5)), actions, *rest, images, said[episode % 2], np.zeros((6, 4)))
    windows = vla_probe.Windows(Demonstrations(tmp_path / "demos"), ["task", "wrist"], [0, 1, 2, 3], 4)
    torch.manual_seed(0)
    policy = tiny_vla()
    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-3)
    policy.train()
    for _ in range(150):
        obs, chunks = windows.batch(torch.randint(len(windows.states), (32,)))
        loss = policy.bc_loss(obs, chunks)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    losses = vla_probe.probes(policy.eval(), windows, 64, ["task", "wrist"])
    assert losses["instruction shuffled"] > losses["intact"] + 0.2, losses
    assert set(losses) == {
        "intact",
        "images shuffled",
        "instruction shuffled",
        "object word swapped",
        "task camera shuffled",
        "wrist camera shuffled",
    }
    assert vla_probe.privileged_at_start(policy, windows) is None  # no auxiliary head
