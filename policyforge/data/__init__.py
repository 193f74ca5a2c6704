"""Demonstration data: scripted experts for the arm tasks, and datasets in the LeRobotDataset v3.0 layout.

`experts.py` state machines that solve the arm tasks (with `action_noise` / `hesitation` to degrade them),
`dataset.py` the crash-safe `DemoWriter` and the `Demonstrations` reader, `layout.py` the on-disk format,
`integrity.py` a dataset's files checked against its metadata (what may be deleted, what is damaged),
`recovery.py` episodes metadata rebuilt from the data files, `collect.py` recording expert episodes into a dataset
(`policyforge collect`), `show.py` a dataset's summary, episodes and an episode's video (`policyforge data show`).
"""

from policyforge.data.dataset import Demonstrations, DemoWriter
from policyforge.data.experts import EXPERTS, ArmExpert

__all__ = ["EXPERTS", "ArmExpert", "DemoWriter", "Demonstrations"]
