import os

os.environ.setdefault("MUJOCO_GL", "egl")

import torch

torch.set_num_threads(1)
