"""XLA settings that must be in place before JAX creates its CPU client (imported by `policyforge.sims`)."""

import os

CPU_FLAGS = (
    "--xla_cpu_use_fusion_emitters=false",
    "--xla_cpu_enable_concurrency_optimized_scheduler=false",
)
"""XLA's CPU fusion emitters duplicate work along kinematic chains, so MJX kinematics costs time exponential
in a chain's depth (jax 0.10.2, one env: 0.6 ms at depth 6, 74 ms at 8, 25 s at 10; the 10-body Panda chain
took 0.4 s per physics step); the classic emitters do not. With them, the concurrency-optimised scheduler
intermittently deadlocks MJX steps of 256+ envs (all threads idle in block_until_ready); without it, 15 of
15 steps ran where 0–2 had."""

for flag in CPU_FLAGS:
    if flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()
