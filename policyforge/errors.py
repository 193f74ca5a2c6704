"""The base class of errors a user can fix: the CLI prints their message (no traceback) and exits with status 2."""

from __future__ import annotations

import errno

DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
"""errno of a write that failed for want of room: a full disk, a file-size limit (RLIMIT_FSIZE), a disk quota."""


class UserError(Exception):
    """Something the user gave (a config, a file, a flag) is wrong or unusable; the message says what and how to fix it.

    Subclasses: `config.ConfigError` (a config field), and one per subsystem (checkpoints, datasets, deployment)."""
