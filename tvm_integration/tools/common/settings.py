"""What travels with a case or a model to another process: the modules users' ops are declared
in ($SIMACCEL_OPS) and the device profile ($SIMACCEL_PROFILE).

Where it sits: the fresh-process check (common/runs.py), Dask workers (tools/executors.py),
saved fuzz reproductions (fuzz/repro.py), conformance workers and bisect reproducers each need
the same declarations as the process that drew the case; these helpers hand them over, .py
paths made absolute.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

from ....ops import USER_OPS_ENV
from ....ops.registry import user_op_entries
from ....profile import PROFILE_ENV, active_profile


def user_op_modules() -> list[str]:
    """The entries of $SIMACCEL_OPS, .py paths made absolute (so a process in another folder finds them)."""
    return [os.path.abspath(e) if e.endswith(".py") else e for e in user_op_entries()]


def user_ops_environ() -> dict:
    """os.environ for a child process: $SIMACCEL_OPS and $SIMACCEL_PROFILE with absolute paths
    (unset stays unset)."""
    env = dict(os.environ)
    if env.get(USER_OPS_ENV, "").strip():
        env[USER_OPS_ENV] = ",".join(user_op_modules())
    if env.get(PROFILE_ENV, "").strip():
        env[PROFILE_ENV] = os.path.abspath(env[PROFILE_ENV])
    return env



@contextlib.contextmanager
def saved_settings(modules, profile: dict | None, who: str = "replay", log=print):
    """While the block runs: $SIMACCEL_OPS also names `modules` (where a saved reproduction's
    users' ops were declared) and, when `profile` (a DeviceProfile as a dict) is not the active
    one, $SIMACCEL_PROFILE is a file holding it; both are restored after."""
    previous_profile = os.environ.get(PROFILE_ENV)
    if profile is not None and profile != active_profile().to_dict():
        path = Path(tempfile.mkdtemp(prefix="simaccel-replay-")) / "profile.json"
        path.write_text(json.dumps(profile))
        os.environ[PROFILE_ENV] = str(path)
        log(f"{who}: ${PROFILE_ENV}={path} (the device profile {profile.get('name')!r} the case was found with)")
    previous = os.environ.get(USER_OPS_ENV)
    missing = [m for m in modules if m not in user_op_modules()]
    if missing:
        os.environ[USER_OPS_ENV] = ",".join(user_op_modules() + missing)
        log(f"{who}: ${USER_OPS_ENV}={os.environ[USER_OPS_ENV]} (the modules this case's user ops were declared in)")
    try:
        yield
    finally:
        for name, value, changed in ((USER_OPS_ENV, previous, bool(missing)), (PROFILE_ENV, previous_profile, True)):
            if changed:
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
