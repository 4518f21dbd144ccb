"""The model zoo of `simaccel conformance`: what models a run checks, and how a worker loads one.

Where it sits: conformance/run.py picks the models (`zoo`), each named by a `ZooModel` whose
`spec` is a short string a Dask worker can load it from again (`load`): nothing but the spec
travels. Three sources:

- "relax": the Relax models the project builds (tools/models.py), at sizes the simulator runs,
  and the decoder with KV caches (tools/decoder.py) in each float dtype: one build run at a
  prefill and at a decode step, against TVM alone and its torch twin where torch is installed;
- "torch": the torch.export models of tools/torch_models.py (torchvision's classification
  CNNs, the transformer, mixer and decoder families; random weights, batch-norm statistics
  calibrated), at "small" or "full" size, when the torch extra is installed; torch's own
  result is the second witness;
- "user": users' models, from model files (a folder of MODEL.py files, each defining `mod` as
  `simaccel build` reads it) or an entry point ``module:function`` (a module name or a .py
  path) returning an IRModule, or a dict of them by name.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field

import numpy as np

from ....errors import SimAccelError
from .. import models

SOURCES = ("relax", "torch", "user")

# The Relax models, small enough for the simulator: name -> (factory, what it holds).
RELAX_MODELS = {
    "demo_cnn": (lambda: models.demo_cnn(), "the demo's CNN: two regions around a TVM-only leaky_relu"),
    "demo_cnn_fp16": (lambda: models.demo_cnn("float16"), "the demo's CNN in float16"),
    "hetero_chain": (lambda: models.hetero_chain(rows=8, features=32, hidden=48),
                     "TVM -> simaccel -> TVM, every stage an output"),
    "long_upstream": (lambda: models.long_upstream(channels=4, size=32),
                      "an NHWC depthwise convolution on TVM before a region"),
    "matmul_relu": (lambda: models.matmul_relu(48), "relu(x @ w)"),
    "conv_bias_relu": (lambda: models.conv_bias_relu(1, 8, 12), "a 3x3 convolution, bias and relu"),
    "depthwise_conv": (lambda: models.conv_bias_relu(1, 8, 12, groups=8), "a 3x3 depthwise convolution"),
}


# The decoder (tools/decoder.py, examples/decoder.py's model) at its small size, by dtype.
DECODERS = {"decoder_f32": "float32", "decoder_f16": "float16", "decoder_bf16": "bfloat16"}
DECODER_PROMPT = 9  # tokens of the prefill; the decode step's cache holds as many


@dataclass(frozen=True)
class ZooModel:
    """One model of a run: its `name`, where it comes from, and the `spec` it is loaded from."""

    name: str
    source: str
    spec: str  # "relax:NAME", "decoder:DTYPE", "torch:NAME:SIZE", "file:PATH" or "entry:MODULE:FUNCTION:NAME"
    doc: str = ""

    def to_json(self) -> dict:
        return {"name": self.name, "source": self.source, "spec": self.spec, "doc": self.doc}


@dataclass
class Loaded:
    """A model ready to check: its Relax module, its inputs and, for a torch model, torch's outputs;
    for a model with symbolic sizes, `more` holds (shape, inputs, torch's outputs) at its other sizes."""

    mod: object
    inputs: list
    torch_outputs: list | None = None
    more: list = field(default_factory=list)


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except ImportError:
        return False
    return True


def zoo(sources=("relax", "torch"), user_models=(), size: str = "small", only: str | None = None) -> list[ZooModel]:
    """The models of a run: the built-in `sources` ("torch" left out, with no error, where torch is
    not installed and it was not asked for alone), then each of `user_models`; `only`: names or
    shell patterns, comma-separated, that a model's name must match."""
    from ..torch_models import ALL_NAMES, SIZES, ZOO_NAMES

    unknown = [s for s in sources if s not in ("relax", "torch")]
    if unknown:
        raise SimAccelError(f"--zoo {','.join(sources)}: unknown source(s) {', '.join(unknown)}; choose from relax, torch")
    if size not in SIZES:
        raise SimAccelError(f"--size {size}: choose from {', '.join(SIZES)}")
    found: list[ZooModel] = []
    if "relax" in sources:
        found += [ZooModel(name, "relax", f"relax:{name}", doc) for name, (_, doc) in RELAX_MODELS.items()]
        found += [ZooModel(name, "relax", f"decoder:{dtype}",
                           f"a LLaMA-style decoder with KV caches in {dtype}: a prefill of {DECODER_PROMPT} tokens, "
                           f"then a decode step onto a cache of {DECODER_PROMPT}, from one build")
                  for name, dtype in DECODERS.items()]
    if "torch" in sources:
        if torch_available():
            from .. import dynamic_models

            found += [ZooModel(name, "torch", f"torch:{name}:{size}") for name in ALL_NAMES + ZOO_NAMES]
            found += [ZooModel(name, "torch", f"dynamic:{name}", "symbolic sizes: one build run at 1, a middle size "
                                                                 "and the upper bounds") for name in dynamic_models.NAMES]
        elif tuple(sources) == ("torch",):
            raise SimAccelError("--zoo torch: torch and torchvision are not installed here; pip install '.[torch]'")
    for entry in user_models:
        found += _user_models(entry)
    names = [m.name for m in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SimAccelError(f"conformance: two models are named {', '.join(twice)}; give users' models other names")
    if only:
        patterns = [p.strip() for p in only.split(",") if p.strip()]
        found = [m for m in found if any(fnmatch.fnmatchcase(m.name, p) for p in patterns)]
        if not found:
            raise SimAccelError(f"--only {only}: no model of the zoo matches; the zoo: {', '.join(names)}")
    if not found:
        raise SimAccelError("conformance: no models to check (give --zoo or --models)")
    return found


def _user_models(entry: str) -> list[ZooModel]:
    """The models `--models ENTRY` names: a folder of model files, one model file, or MODULE:FUNCTION."""
    if os.path.isdir(entry):
        files = sorted(f for f in os.listdir(entry) if f.endswith(".py") and not f.startswith("_"))
        if not files:
            raise SimAccelError(f"--models {entry}: the folder holds no model files (*.py defining `mod`)")
        return [_file_model(os.path.join(entry, f)) for f in files]
    if entry.endswith(".py"):
        if not os.path.isfile(entry):
            raise SimAccelError(f"--models {entry}: no such file")
        return [_file_model(entry)]
    module, sep, function = entry.rpartition(":")
    if not sep or not module or not function.isidentifier():
        raise SimAccelError(f"--models {entry}: expected a folder of model files, a MODEL.py or MODULE:FUNCTION")
    module = os.path.abspath(module) if module.endswith(".py") else module
    built = _entry_point(module, function)
    return [ZooModel(name, "user", f"entry:{module}:{function}:{name}", f"{entry} -> {name}") for name in built]


def _file_model(path: str) -> ZooModel:
    name = os.path.splitext(os.path.basename(path))[0]
    return ZooModel(name, "user", f"file:{os.path.abspath(path)}", path)


def _entry_point(module: str, function: str) -> dict:
    """What the entry point returns, as {name: IRModule}."""
    import tvm

    from ....ops.registry import import_entry

    where = f"--models {module}:{function}"
    try:
        found = getattr(import_entry(module), function)
    except AttributeError:
        raise SimAccelError(f"{where}: {module} has no function {function}") from None
    except Exception as e:  # the user's module: its error is the message
        raise SimAccelError(f"{where}: cannot import {module}: {type(e).__name__}: {e}") from e
    try:
        built = found()
    except Exception as e:
        raise SimAccelError(f"{where}: calling it raised {type(e).__name__}: {e}") from e
    if isinstance(built, tvm.IRModule):
        return {function: built}
    if isinstance(built, dict) and built and all(isinstance(m, tvm.IRModule) for m in built.values()):
        return {str(name): m for name, m in built.items()}
    raise SimAccelError(f"{where}: returned a {type(built).__name__}; return a tvm.IRModule or a dict of them by name")


def load(spec: str, seed: int = 0) -> Loaded:
    """The model `spec` names, with seeded inputs (a torch model's: standard normal, as its
    calibration saw); torch models also with torch's result on the CPU."""
    from .. import torch_models
    from ..build_library import load_model

    kind, _, rest = spec.partition(":")
    if kind == "relax":
        mod = RELAX_MODELS[rest][0]()
    elif kind == "decoder":
        return _decoder(rest, seed)
    elif kind == "torch":
        name, _, size = rest.partition(":")
        model = torch_models.load(name, size, seed)
        x = np.random.default_rng(seed + 1).standard_normal(model.input_shape).astype(np.float32)
        return Loaded(model.to_relax(), [x], model.run_all(x))
    elif kind == "dynamic":
        from .. import dynamic_models

        model = dynamic_models.load(rest, "small", seed)
        runs = [(size, [model.inputs(size, seed)]) for size in model.sizes]
        runs = [(size, x, [model.run(x[0])]) for size, x in runs]
        return Loaded(model.to_relax(), runs[0][1], runs[0][2], runs[1:])
    elif kind == "file":
        mod = load_model(rest)
    elif kind == "entry":
        module, function, name = rest.rsplit(":", 2)
        mod = _entry_point(module, function)[name]
    else:
        raise SimAccelError(f"conformance: unknown model spec {spec!r}")
    return Loaded(mod, models.random_inputs(mod, seed))


def _decoder(dtype: str, seed: int) -> Loaded:
    """The decoder in `dtype`: its prefill's inputs (tokens in the vocabulary, empty caches) and a
    decode step's (one token onto random caches of DECODER_PROMPT rows), each with its torch
    twin's outputs where torch is installed."""
    from .. import decoder as model

    if dtype not in DECODERS.values():
        raise SimAccelError(f"conformance: no decoder in {dtype!r}; the dtypes: {', '.join(DECODERS.values())}")
    c, n = model.SMALL, DECODER_PROMPT
    rng = np.random.default_rng(seed)
    weights = model.random_weights(dtype, rng, c)
    prefill = [rng.integers(0, c.vocab, (1, n)), *model.rotary_tables(0, n, dtype, c), *model.empty_caches(dtype, c),
               *weights]
    caches = [rng.standard_normal((1, n, c.kv_heads, c.head_dim)).astype(dtype) for _ in range(2 * c.layers)]
    decode = [rng.integers(0, c.vocab, (1, 1)), *model.rotary_tables(n, 1, dtype, c), *caches, *weights]
    twin = _torch_twin(model, weights, dtype, c)
    return Loaded(model.decoder(dtype, c), prefill, twin(prefill), [((1, n), decode, twin(decode))])


def _torch_twin(model, weights, dtype: str, c):
    """inputs -> the torch twin's outputs as float32 arrays, or None without torch."""
    try:
        import torch
    except ImportError:
        return lambda inputs: None

    step = model.torch_twin(weights, dtype, c)

    def run(inputs):
        tokens, cos, sin, *rest = inputs
        tensors = [torch.from_numpy(np.asarray(a, np.float32)).to(getattr(torch, dtype))
                   for a in (cos, sin, *rest[:2 * c.layers])]
        outputs = step(torch.from_numpy(tokens), tensors[0], tensors[1], tensors[2:])
        return [o.float().numpy() for o in outputs]

    return run

