"""Saved fuzz failures: a folder per case that checks it again (`simaccel fuzz --replay DIR`).

Where it sits: the campaign (fuzz/campaign.py) saves each distinct failure it found (and a
few cases where TVM alone was the one off) as model.py (TVMScript), inputs.npz, case.json
and a repro.py that replays it with the users' ops and device profile it was found with.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ....errors import SimAccelError, UnsupportedOpError
from ....ops import USER_OPS_ENV
from ....profile import PROFILE_ENV, active_profile
from ..backends import SIMACCEL, Backend, check_engines
from ..build_library import module_source
from ..common.arrays import write_arrays
from .check import FAIL, Checker, Outcome
from .models import Case, case_from_json, case_to_json
from ..common.settings import saved_settings, user_op_modules

REPRO = '''"""Check a simaccel fuzz failure again: python repro.py (exit 1 while it still fails)."""
import pathlib
import sys

from simaccel.tvm_integration.tools.fuzz import replay

sys.exit(replay(pathlib.Path(__file__).resolve().parent))
'''


def save_reproduction(case: Case, outcome: Outcome, engines, out_dir, name: str | None = None,
                      partition: str = SIMACCEL) -> Path:
    """Write model.py (TVMScript), inputs.npz, case.json and repro.py into out_dir/`name`
    (default: case-<hash of the case>); return the folder. `partition`: the backend checked."""
    from .... import __version__

    data = case_to_json(case)
    name = name or f"case-{hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]}"
    folder = Path(out_dir) / name
    folder.mkdir(parents=True, exist_ok=True)
    modules = user_op_modules()
    user = (f"# users' ops {case.user_ops}: declared in ${USER_OPS_ENV}={','.join(modules)} (replay sets it)\n"
            if case.user_ops else "")
    # model.py and inputs.npz are what `simaccel bisect / build / run` read: a model file, and
    # main's arguments in order (arg0, arg1, ...), constants among them.
    (folder / "model.py").write_text(
        f"# simaccel fuzz: {outcome.reason}\n# parameters the fuzzer bound as constants: "
        f"{[v.name for v in case.params if v.constant]} (here main's arguments, in inputs.npz)\n" + user
        + module_source(case.module())
    )
    write_arrays(folder / "inputs.npz", case.arrays(), "reproduction inputs")
    (folder / "case.json").write_text(json.dumps(
        {"engines": list(engines), "partition": partition, "verdict": outcome.verdict, "reason": outcome.reason,
         "simaccel": __version__, "user_op_modules": modules,
         "profile": active_profile().to_dict() if os.environ.get(PROFILE_ENV) else None, "case": data}, indent=1, default=list))
    (folder / "repro.py").write_text(REPRO)
    return folder


def replay(folder, log=print) -> int:
    """Check a saved case again on its engines: 0 when it now passes, 1 when it still fails.

    The modules its user ops were declared in (case.json's ``user_op_modules``) are added to
    $SIMACCEL_OPS while it runs."""
    folder = Path(folder)
    try:
        saved = json.loads((folder / "case.json").read_text())
        data, engines, modules = saved["case"], saved["engines"], list(saved.get("user_op_modules") or [])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise SimAccelError(f"{folder}: not a simaccel fuzz reproduction (case.json: {e})") from e
    backend = Backend(saved.get("partition") or SIMACCEL)
    try:  # a case found on a GPU: say so here, not "skipped" for want of one
        check_engines(engines, backend, "replay")
    except SimAccelError as e:
        raise SimAccelError(f"{folder}: the case was found on engines {', '.join(engines)}: {e}") from e
    with saved_settings(modules, saved.get("profile"), "replay", log):
        try:
            case = case_from_json(data)
        except UnsupportedOpError as e:
            ops = sorted({v.get("op") for v in data["values"] if "." in (v.get("op") or "")})
            raise SimAccelError(f"{folder}: the case uses users' ops {', '.join(ops)}, not all declared in this process; "
                                f"it was saved with ${USER_OPS_ENV}={','.join(modules) or '(unset)'}") from e
        except (ValueError, KeyError, TypeError) as e:
            raise SimAccelError(f"{folder}: not a simaccel fuzz reproduction (case.json: {e})") from e
        checker = Checker(engines, backend=backend)
        outcome = checker.check(case, export=0)  # and exported and reloaded, as a sampled case is
        if outcome.verdict != FAIL:
            outcome = next((o for _, _, o in checker.check_exported()), outcome)
    log(f"{case.describe()}\n{outcome.verdict}{': ' + outcome.reason if outcome.reason else ''}")
    return 1 if outcome.verdict == FAIL else 0

