"""The VLA recipes (configs/vla-*.yaml) load, and the PPO fine-tuning of the VLA and of the plain flow policy is the
same recipe but for the policy class."""

from policyforge.algos.runner import RunConfig
from policyforge.cli import find_recipe
from policyforge.config import load, to_dict


def _recipe(name: str) -> RunConfig:
    return load(RunConfig, find_recipe(f"{name}.yaml"))


def test_the_vla_bc_recipe_clones_every_family_from_both_cameras():
    config = _recipe("vla-bc")
    assert config.policy.tag == "vla" and config.algo.tag == "bc"
    assert config.sim.task == "arm-instructed" and config.sim.image.cameras == ["task", "wrist"]
    assert config.sim.task_options.get("families") is None  # every family
    assert config.sim.task_options["instructions"] == "train"


def test_the_vla_ppo_recipe_fine_tunes_the_bc_run_with_a_privileged_critic_and_a_frozen_backbone():
    config = _recipe("vla-ppo")
    assert config.init_policy == "runs/vla-bc"
    assert config.sim.task_options["reward_type"] == "sparse"
    assert config.algo.critic_obs_key == "critic"
    assert config.policy.freeze_backbone and config.policy.chain_noise == "reinflow"
    assert config.policy.initial_noise == 0.0  # the chain explores around act's path
    assert config.sim.num_envs > 1  # several instructions (and families) in one batch


def test_the_flow_twin_differs_from_the_vla_recipe_only_in_the_policy_class():
    vla, flow = to_dict(_recipe("vla-ppo")), to_dict(_recipe("vla-ppo-flow"))
    vla_policy, flow_policy = vla.pop("policy"), flow.pop("policy")
    for run in (vla, flow):
        del run["name"], run["init_policy"]  # each run starts from its own class's BC run
    assert vla == flow
    assert (vla_policy.pop("class"), flow_policy.pop("class")) == ("vla", "flow")
    shared = set(vla_policy) & set(flow_policy)
    assert {key: vla_policy[key] for key in shared} == {key: flow_policy[key] for key in shared}
    chain = {"chain_noise", "noise_std_range", "initial_noise", "stochastic_steps", "chunk", "steps", "variant"}
    assert chain <= shared


def test_the_ppo_recipe_builds_the_architecture_the_bc_recipe_trains():
    """init_policy loads the BC run's weights: every field that shapes a weight must agree."""
    bc, ppo = to_dict(_recipe("vla-bc"))["policy"], to_dict(_recipe("vla-ppo"))["policy"]
    shaping = (
        "vision", "width", "heads", "prefix_layers", "expert_layers", "time_dim", "chunk", "language_film",
        "estimate_token", "expert", "expert_hidden",
    )  # fmt: skip
    assert {key: bc[key] for key in shaping} == {key: ppo[key] for key in shaping}
