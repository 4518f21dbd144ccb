"""`simaccel fuzz`: random Relax models, built with simaccel and with TVM alone, compared.

The package, by concern:

- the models (`models` re-exports their public names): `choices` (the recorded random choices),
  `vocabulary` (the built-in ops: Relax builder, shape, float64 semantics), `user_ops` (users'
  families as nodes), `case` (a model, its Relax module and float64 reference, JSON), `build`
  (op group by op group, a table of kinds) and `draw` (whole random models);
- `check`: one case built both ways, run on every engine, judged (`Checker`, `case_verdict`);
- `shrink`: the choice-sequence shrinker;
- `campaign`: a campaign of cases from one seed, in batches, failures grouped by signature,
  shrunk and saved (`run_fuzz`);
- `cluster`: the campaign's tasks on a Dask cluster (optional extra `simaccel[dask]`);
- `repro`: saved reproductions and `replay`.

What travels with a case to another process (users' ops, the device profile), the verdicts,
the runs and the retry policy are the tools' shared ground (tools/common/), which conformance
and bisect use too.
"""

from .campaign import Campaign, check_batch, run_fuzz, shrink_failure
from .check import FAIL, PASS, SKIP, TVM_OFF, Checker, Outcome, case_verdict
from .case import case_from_json, case_to_json
from .repro import replay, save_reproduction
from ..common.settings import saved_settings, user_op_modules, user_ops_environ

__all__ = ["Campaign", "Checker", "FAIL", "Outcome", "PASS", "SKIP", "TVM_OFF", "case_from_json", "case_to_json",
           "case_verdict", "check_batch", "replay", "run_fuzz", "save_reproduction", "saved_settings", "shrink_failure",
           "user_op_modules", "user_ops_environ"]
