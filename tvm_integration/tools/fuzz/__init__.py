"""`simaccel fuzz`: random Relax models, built with simaccel and with TVM alone, compared.

The package, by concern:

- `models`: the vocabulary and the drawing (random models with their float64 references);
- `check`: one case built both ways, run on every engine, compared (`Checker`, `compare`);
- `shrink`: the choice-sequence shrinker;
- `campaign`: a campaign of cases from one seed, in batches, failures grouped by signature,
  shrunk and saved (`run_fuzz`);
- `cluster`: the campaign's tasks on a Dask cluster (optional extra `simaccel[dask]`);
- `repro`: saved reproductions and `replay`;
- `settings`: what travels with a case to another process (users' ops, the device profile).
"""

from .campaign import Campaign, check_batch, run_fuzz, shrink_failure
from .check import FAIL, PASS, SKIP, TOLERANCE, TVM_OFF, Checker, Outcome, compare
from .models import case_from_json, case_to_json
from .repro import replay, save_reproduction
from .settings import saved_settings, user_op_modules, user_ops_environ

__all__ = ["Campaign", "Checker", "FAIL", "Outcome", "PASS", "SKIP", "TOLERANCE", "TVM_OFF", "case_from_json",
           "case_to_json", "check_batch", "compare", "replay", "run_fuzz", "save_reproduction", "saved_settings",
           "shrink_failure", "user_op_modules", "user_ops_environ"]
