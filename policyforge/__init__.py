"""policyforge: train policies in parallel simulation, fine-tune generative policies with RL, deploy safely."""

import os

os.environ.setdefault("MUJOCO_GL", "egl")  # headless offscreen rendering; must precede the first `import mujoco`

__version__ = "0.1.0"
