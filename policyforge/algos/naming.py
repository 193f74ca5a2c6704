"""What a run is called where people read it (plot titles, progress, evaluation output): the method's name as
papers use it (DPPO, ReinFlow, Flow-SDE, residual PPO / SAC, BC, PPO, SAC, DSRL, RPD, DAgger), derived from the run
config's algorithm and policy settings. The one place that names methods."""

from __future__ import annotations

from typing import Any

from policyforge.config import TAG_KEY, to_dict

PPO_ON = {"diffusion": "DPPO", "gaussian": "PPO"}
"""PPO's name by the policy class it trains (flow and residual policies are named by their settings)."""
FLOW_CHAIN_NOISE = {"reinflow": "ReinFlow", "sde": "Flow-SDE"}
"""PPO on a flow policy, by how its chain is made stochastic (`policy.chain_noise`)."""
DISTILL_MODES = {"rpd": "RPD", "dagger": "DAgger", "bc": "BC from a teacher"}
"""Distillation (`algo: distill`) by its mode."""


def policy_name(section: dict[str, Any]) -> str:
    """A policy section's class in words (`diffusion`, `flow`, `shortcut flow`, `gaussian`, `residual`...), from
    its settings as `config.to_dict` writes them."""
    tag, variant = section[TAG_KEY], section.get("variant", "rectified")
    return f"{variant} {tag}" if tag == "flow" and variant != "rectified" else tag


def method_name(config: Any) -> str:
    """The method a `RunConfig` trains, e.g. "DPPO" (PPO on a diffusion policy), "ReinFlow", "Flow-SDE",
    "residual PPO (flow base)", "BC (diffusion)", "PPO", "SAC", "DSRL (SAC in a base's noise)", "residual SAC
    (flow base)"; `ALGO (policy)`
    for other combinations."""
    algo, policy = config.algo.tag, to_dict(config.policy)
    tag = policy[TAG_KEY]
    if algo == "bc":
        return f"BC ({policy_name(policy)})"
    if algo == "reward_model":
        return "reward model"
    if algo == "distill":
        return f"{DISTILL_MODES[config.algo.mode]} ({policy_name(policy)} student)"
    if algo == "ppo" and config.sim.reward_model.path:
        return ppo_method(tag, policy) + " on a learned reward"
    if algo == "ppo":
        return ppo_method(tag, policy)
    if algo == "sac" and tag == "gaussian":
        return "DSRL (SAC in a base's noise)" if config.sim.steer.base else "SAC"
    if algo == "sac" and tag == "residual":
        return f"residual SAC ({policy_name(policy['base'])} base)"
    return f"{algo.upper()} ({policy_name(policy)})"


def ppo_method(tag: str, policy: dict[str, Any]) -> str:
    """The name of PPO on a policy of class `tag` (`policy`: its section): "PPO", "DPPO", "ReinFlow", ..."""
    if tag in PPO_ON:
        return PPO_ON[tag]
    if tag in ("flow", "vla") and policy.get("chain_noise") in FLOW_CHAIN_NOISE:  # a VLA is a flow policy
        return FLOW_CHAIN_NOISE[policy["chain_noise"]] + (" (VLA)" if tag == "vla" else "")
    if tag == "residual":
        return f"residual PPO ({policy_name(policy['base'])} base)"
    return f"PPO ({policy_name(policy)})"


def run_title(config: Any) -> str:
    """`<task> · <method>`, e.g. "arm-lift-cube · DPPO"."""
    return f"{config.sim.task} · {method_name(config)}"
