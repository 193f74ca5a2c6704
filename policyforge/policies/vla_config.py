"""The VLA's configuration (`policy: {class: vla}`); the policy itself is `policies.vla`."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Literal

from policyforge.config import ConfigError, check, check_in, check_sizes
from policyforge.policies.base import EnvSpec, register_policy
from policyforge.policies.chunked import IMAGE_KEY
from policyforge.policies.flow import FlowChainConfig
from policyforge.policies.networks import MAX_WIDTH
from policyforge.policies.vla_networks import VisionConfig
from policyforge.sims.instruction_obs import INSTRUCTION_KEY

if TYPE_CHECKING:
    from policyforge.policies.vla import VLAPolicy

MAX_LAYERS = 24
"""Most transformer layers of the prefix or the expert (π0's expert has 18)."""
PRIVILEGED_KEY = "critic"
"""The privileged state the auxiliary loss regresses (the task's critic observation)."""


def require_images_and_instruction(env: EnvSpec, policy_class: str, how: str = "") -> None:
    """ConfigError naming policy.class unless `env` gives camera images and an instruction (`how`: how they come)."""
    for key, what in ((IMAGE_KEY, "camera images: set sim.image.cameras"), (INSTRUCTION_KEY, "instructions")):
        if key not in env.obs_shapes:
            raise ConfigError(
                "policy.class",
                f"a {policy_class} policy reads obs[{key!r}] ({what}); this env has {sorted(env.obs_shapes)} "
                f"(instructions come from tasks that draw them, e.g. arm-instructed{', ' + how if how else ''})",
            )


@register_policy("vla")
@dataclasses.dataclass
class VLAConfig(FlowChainConfig):
    """A vision-language-action policy: transformer prefix + flow-matching action expert."""

    vision: VisionConfig = dataclasses.field(default_factory=VisionConfig)
    """Image tokens."""
    width: int = 128
    """W, the width of every prefix and expert token."""
    heads: int = 4
    """Attention heads (divides width)."""
    prefix_layers: int = 2
    """Transformer layers over [image tokens, language tokens, proprio token]."""
    prefix_state: bool = True
    """The prefix ends with a proprioception token. Off (MLP expert only, which reads the state in its readout):
    the prefix sees images and instruction only, so the privileged head's estimate of the scene comes from the
    images. Why: with it on, the estimate of the named cube's place followed the arm once it moved (in the
    demonstrations the gripper is at the cube): in closed loop, shuffling the state between envs moved that estimate
    by 12-13 cm, shuffling the images by 3-5 cm; the same expert given the true place succeeded 33% against 5%
    (BENCHMARKS.md, "VLA behaviour cloning")."""
    expert: Literal["attention", "mlp"] = "attention"
    """The action expert: `attention` (π0's: action tokens attending to the prefix tokens) or `mlp` (the flow
    policy's MLP over the chunk, reading a linear readout of the normalised state and, with `estimate_token`, of the
    privileged head's estimate of the scene, else also the pooled prefix; `vla_networks.MLPExpert` says why)."""
    expert_layers: int = 2
    """Layers of the attention expert (each attends to the prefix and to the action tokens)."""
    expert_hidden: list[int] = dataclasses.field(default_factory=lambda: [256, 256, 256])
    """Hidden sizes of the MLP expert (expert: mlp)."""
    time_dim: int = 32
    """Size of the sinusoidal embeddings of t and delta."""
    normalize_state: bool = True
    """Normalise the proprioception with running statistics (fitted on the demonstrations for BC)."""
    language_film: bool = True
    """Modulate the image tokens by the instruction (FiLM, as RT-1 and BC-Z condition their image encoders) before
    the prefix transformer, so the named object stands out in the tokens themselves. Without it the prefix has to
    bind a colour word to a place by attention alone, which BC did not find: on two coloured squares whose named
    one's place is the action, the error stayed at the midpoint guess's (0.26) for 1,500 steps, and fell to 0.05
    with FiLM (tests/policies/test_vla.py::test_the_vla_grounds_the_named_object); on arm-instructed BC without
    FiLM reached 0% at 3,000 steps and shuffling the images between samples left its loss unchanged."""
    privileged_aux_weight: float = 0.0
    """BC only: weight of an auxiliary loss, the privileged simulator state (the dataset's
    `observation.environment_state`, the task's critic observation: object poses, the named cube's place) regressed
    from the pooled prefix, so what the images show of the named object is learnt from every frame rather than
    only from the frames whose action reveals it (0: off; the policy never reads that state when acting)."""
    estimate_token: bool = False
    """The action expert also reads the privileged head's estimate of the privileged state (object poses, the named
    cube's place: obs["critic"] as the auxiliary loss teaches it), a summary of the scene in the terms a
    state-based policy learns the task from: the attention expert as one more prefix token, the MLP expert in its
    readout (in place of the pooled prefix). Why: on arm-instructed, flow BC from that state reached
    50% in 3,000 steps of 64 while the VLA, whose auxiliary loss learnt the state from its images, stayed at 0%
    (BENCHMARKS.md, "VLA behaviour cloning"). BC trains the estimate with privileged_aux_weight > 0; RL keeps it
    as BC left it when the backbone is frozen."""
    estimate_pool: Literal["mean", "attention"] = "mean"
    """What the privileged head reads of the prefix: the mean of its valid tokens, or a learned query attending to
    them (`vla_networks.AttentionPool`)."""
    bc_true_estimate: float | None = None
    """BC only (with `estimate_token`, the MLP expert and the auxiliary loss): the expert learns from the true
    privileged state (the dataset's observation.environment_state, normalised) plus Gaussian noise of this standard
    deviation (normalised units) in place of the head's estimate, while the head learns that state by the auxiliary
    loss alone; acting always reads the estimate (null: off, the expert learns from the estimate). The expert then
    acts on the scene as it is, and a better estimate makes a better policy: `policyforge bench vla-estimate` swaps
    the truth in to measure what perception costs (BENCHMARKS.md, "VLA behaviour cloning": 27% and 44% on the true
    state against 2% and 5% on the estimate; an expert that learnt from the estimate reached 14% on either)."""
    freeze_backbone: bool = False
    """Freeze vision, language projection and prefix transformer (and the state estimate: `estimate_token`, and the
    MLP expert's readout; RL then trains the expert and noise network)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in(self.width, "width", f"[8, {MAX_WIDTH}]")
        check_in(self.heads, "heads", f"[1, width={self.width}]")
        check(self.width % self.heads == 0, "heads", f"must divide width={self.width}, got {self.heads}")
        check_in(self.prefix_layers, "prefix_layers", f"[1, {MAX_LAYERS}]")
        check_in(self.expert_layers, "expert_layers", f"[1, {MAX_LAYERS}]")
        check_in(self.time_dim, "time_dim", f"[2, {MAX_WIDTH}]")
        check_in(self.privileged_aux_weight, "privileged_aux_weight", "[0, 100]", "0: off")
        check_sizes(self.expert_hidden, "expert_hidden", MAX_WIDTH)
        check(bool(self.expert_hidden), "expert_hidden", "the MLP expert needs at least one hidden layer")
        check(self.time_dim % 2 == 0, "time_dim", f"must be even, got {self.time_dim}")
        check_in(self.bc_true_estimate, "bc_true_estimate", "[0, 10]", "the noise's standard deviation; null: off")
        check(
            self.bc_true_estimate is None
            or (self.estimate_token and self.expert == "mlp" and self.privileged_aux_weight),
            "bc_true_estimate",
            "the MLP expert's estimate stands in for the truth only with estimate_token, expert: mlp and "
            "privileged_aux_weight > 0 (which teaches the head); set them or leave bc_true_estimate null",
        )
        check(
            self.prefix_state or self.expert == "mlp",
            "prefix_state",
            "the attention expert reads the state only through the prefix: keep prefix_state true or set expert: mlp",
        )

    def build(self, env: EnvSpec) -> VLAPolicy:
        from policyforge.policies.vla import VLAPolicy  # the policy module imports this one

        require_images_and_instruction(env, "vla", "as token ids when the `vla` extra is installed: scripts/setup.sh")
        estimated = self.privileged_aux_weight or self.estimate_token
        privileged = env.obs_shapes.get(PRIVILEGED_KEY, (0,))[0] if estimated else 0
        for field, on in (
            ("privileged_aux_weight", self.privileged_aux_weight),
            ("estimate_token", self.estimate_token),
        ):
            if on and not privileged:
                raise ConfigError(
                    f"policy.{field}",
                    f"it estimates the privileged state obs[{PRIVILEGED_KEY!r}] and this env has none; turn it off",
                )
        return VLAPolicy(env.state_dim, env.action_dim, self, tuple(env.obs_shapes[IMAGE_KEY]), privileged)
