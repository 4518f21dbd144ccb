"""`simaccel conformance`: a model zoo through the whole BYOC flow, for simaccel or any BYOC backend.

The package, by concern:

- `zoo`: the models (the project's Relax models, torch.export models with the torch extra,
  users' model files and entry points) and how a worker loads one from its spec;
- `check`: one model partitioned, built with the backend and with TVM alone, run on every
  engine, compared (with torch where present), reloaded in a fresh process, timed on a GPU;
- `run`: the run over the zoo, one task per model, in this process or on Dask
  (tools/executors.py), retries, results written as the models finish (`run_conformance`);
- `report`: model verdicts, the markdown and HTML tables, `--compare OLD.json`.

The verdicts, stages, the fresh-process reload and the retry policy are the shared ground's
(tools/common/), as the fuzzer's are; results are judged by simaccel.compare's rule, as every
tool judges them; the executors are tools/executors.py's; the backend is simaccel's or
another's partition function (tools/backends.py).
"""

from .check import check_model, output_mismatch
from .report import model_verdict, run_regressions
from .run import default_engines, run_conformance
from .zoo import DECODERS, RELAX_MODELS, ZooModel, load, zoo

__all__ = ["DECODERS", "RELAX_MODELS", "ZooModel", "check_model", "default_engines", "load", "model_verdict", "output_mismatch",
           "run_conformance", "run_regressions", "zoo"]
