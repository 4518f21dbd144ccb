"""The sanitizer on the GPU: planted defects in users' ops, each in native regions and on the cuda engine.

    python scripts/debug_tools_gpu.py OUT.json      # on the GPU machine, full TVM
    python scripts/debug_tools_gpu.py OUT.json --device cpu   # a smoke test here (Python regions, sim)
    simaccel sanitize -- python scripts/debug_tools_gpu.py --plain planted.past_end   # under compute-sanitizer

Each op of tests/user_ops/planted_defects.py (a user's op, declared outside the package) sits
in the middle of a three-op region, TVM's kernels before and after it:

    x -> relax.exp (TVM) -> tanh -> PLANTED -> sigmoid (one simaccel region) -> log_softmax (TVM)

and runs four ways: native regions with the sanitizer switched on (`simaccel.debug.sanitize()`),
native regions from a build with `sanitize=True` (no switch), the Python cuda engine with the
sanitizer, and native regions without it (where the defect goes unnoticed or silently wrong).
A clean model (relax.sigmoid in the planted op's place) runs sanitized and not, compared with
TVM alone (simaccel.compare's rule for whole outputs), and the sanitizer's cost is timed: one VM call and a device sync, medians of
repeated runs, the ratio of sanitized to not. Everything goes to OUT.json.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PLANTED = os.path.join(HERE, "..", "tests", "user_ops", "planted_defects.py")
CASES = {  # op -> (Relax op it matches, what the sanitizer must say)
    "planted.skip_last": ("negative", "unwritten"),
    "planted.past_end": ("abs", "out_of_bounds"),
    "planted.into_input": ("square", "input_written"),
    "planted.other_stream": ("floor", "stream"),
}
SHAPE = (4, 33)


def model(relax_op: str):
    import tvm
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(SHAPE, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            h = bb.emit(relax.op.exp(x))  # TVM
            h = bb.emit(relax.op.tanh(h))  # simaccel ...
            h = bb.emit(getattr(relax.op, relax_op)(h))  # ... the planted op ...
            h = bb.emit(relax.op.sigmoid(h))  # ... simaccel
            out = bb.emit_output(relax.op.nn.log_softmax(h))  # TVM
        bb.emit_func_output(out)
    return bb.get()


DEVICE = "cuda"


def run_once(executable, x):
    import tvm
    from tvm import relax

    dev = tvm.device(DEVICE, 0)
    vm = relax.VirtualMachine(executable, dev)
    out = vm["main"](tvm.runtime.tensor(x, dev)).numpy()
    dev.sync()
    return out


def attempt(fn) -> dict:
    """Run `fn`; what happened: the result, or the error's kind, message and attributes."""
    from simaccel.errors import SanitizerError

    try:
        return {"raised": None, "result": fn()}
    except SanitizerError as e:
        return {"raised": "SanitizerError", "kind": e.kind, "region": e.region, "op": e.op, "tensor": e.tensor,
                "message": str(e)}
    except Exception as e:  # noqa: BLE001  what else happened is the finding
        return {"raised": type(e).__name__, "message": str(e), "traceback": traceback.format_exc(limit=4)}


def main(out_path: str, device: str = "cuda") -> int:
    global DEVICE
    DEVICE = device
    os.environ["SIMACCEL_OPS"] = PLANTED
    import tvm

    from simaccel.tvm_integration import default_target

    target = default_target(device)
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    results = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "host": platform.node(),
               "device": tvm.cuda(0).device_name if device == "cuda" else "cpu", "cases": {}, "ok": True}
    for op, (relax_op, kind) in CASES.items():
        case = planted_case(op, relax_op, kind, target, x, device)
        results["cases"][op] = case
        results["ok"] &= bool(case["caught"])
        print(f"{op:24s} caught={case['caught']}", flush=True)
    clean = clean_case(target, x, device)
    results["clean"] = clean
    results["ok"] &= clean["ok"]
    print("clean", json.dumps(clean), flush=True)
    with open(out_path, "w") as f:
        json.dump(results, f, indent=2)
    print("RESULT:", "ok" if results["ok"] else "NOT OK")
    return 0 if results["ok"] else 1


def planted_case(op: str, relax_op: str, kind: str, target, x, device: str) -> dict:
    """`op`'s model built and run every way; whether the sanitizer caught it (`caught`) in each."""
    from simaccel.tvm_integration import build, build_tvm_only

    mod = model(relax_op)
    case: dict = {"expected_kind": kind}
    want = run_once(build_tvm_only(mod, target), x)
    built = attempt(lambda: build(mod, target))
    if built["raised"]:  # e.g. a launcher that launches on a stream of its own: refused when its plan is recorded
        case["build"] = built
        case["caught"] = built.get("kind") == kind and op in built.get("message", "")
    else:
        case.update(sanitized_runs(mod, built["result"], target, x, device))
        case["native_unsanitized"] = unsanitized_run(built["result"], x, want, device)
        kinds = {kind, "index"} if device == "cpu" and kind == "out_of_bounds" else {kind}  # the simulator's arrays refuse the write
        case["caught"] = all(case[m].get("kind") in kinds and case[m].get("op") == op and case[m].get("region")
                             for m in ("native_switch", "native_baked", "cuda_engine"))
    for value in case.values():
        if isinstance(value, dict):
            value.pop("result", None)
    return case


def native_regions(device: str):
    """Native regions on a GPU; on the CPU smoke test, the sim engine stands in."""
    import simaccel

    return contextlib.nullcontext() if device == "cuda" else simaccel.get_runtime().use_engine("sim")


def sanitized_runs(mod, executable, target, x, device: str) -> dict:
    """What happened under the sanitizer: switched on around native regions (`native_switch`),
    built in (`native_baked`: a build with sanitize=True) and on the Python kernel engine (`cuda_engine`)."""
    import simaccel
    from simaccel import debug
    from simaccel.tvm_integration import build

    kernel_engine = "cuda" if device == "cuda" else "sim"  # the Python engine that runs the kernels

    def sanitized():
        with debug.sanitize(), native_regions(device):
            return run_once(executable, x)

    def baked():
        sanitizing_build = build(mod, target, sanitize=True)
        with native_regions(device):
            return run_once(sanitizing_build, x)

    def cuda_engine():
        with debug.sanitize(), simaccel.get_runtime().use_engine(kernel_engine):
            return run_once(executable, x)

    return {"native_switch": attempt(sanitized), "native_baked": attempt(baked), "cuda_engine": attempt(cuda_engine)}


def unsanitized_run(executable, x, want, device: str) -> dict:
    """Native regions without the sanitizer: what the defect does unnoticed (the error against TVM alone)."""
    def unsanitized():
        with native_regions(device):
            return run_once(executable, x)

    plain = attempt(unsanitized)
    if plain["raised"] is None:
        got = plain.pop("result")
        plain["max_abs_error_vs_tvm"] = float(np.nanmax(np.abs(got - want))) if np.isfinite(got).any() else None
        plain["finite"] = bool(np.isfinite(got).all())
    return plain


def clean_case(target, x, device: str) -> dict:
    """A clean region, sanitized and not, against TVM alone; and the sanitizer's cost."""
    import tvm
    from tvm import relax

    from simaccel.tvm_integration import build, build_tvm_only

    mod = model("sigmoid")
    want = run_once(build_tvm_only(mod, target), x)
    executable = build(mod, target)
    dev = tvm.device(device, 0)
    vm = relax.VirtualMachine(executable, dev)
    tensor = tvm.runtime.tensor(x, dev)
    clean = {name: timed_clean_run(vm, dev, tensor, switch, want)
             for name, switch in (("native", False), ("native_sanitized", True))}
    clean["slowdown"] = clean["native_sanitized"]["median_ms"] / clean["native"]["median_ms"]
    clean["ok"] = all(clean[n]["mismatch"] is None for n in ("native", "native_sanitized"))
    return clean


def timed_clean_run(vm, dev, tensor, switch: bool, want) -> dict:
    """Median milliseconds of 30 calls (the first 5 left out), sanitized or not, and how the last
    call's output compares with TVM alone's (its largest difference; the mismatch, or None)."""
    from simaccel import debug
    from simaccel.compare import array_difference

    times = []
    with debug.sanitize(switch):
        for _ in range(30):
            start = time.perf_counter()
            got = vm["main"](tensor)
            dev.sync()
            times.append(time.perf_counter() - start)
    found = array_difference(got.numpy(), want, scaled=True)
    return {"median_ms": statistics.median(times[5:]) * 1e3, "max_abs_error_vs_tvm": found.max_error,
            "mismatch": None if found.ok else found.reason}


def plain(op: str, device: str) -> int:
    """Build `op`'s model with simaccel and run it once, no sanitizer: compute-sanitizer watches."""
    global DEVICE
    DEVICE = device
    os.environ["SIMACCEL_OPS"] = PLANTED
    from simaccel.tvm_integration import build, default_target

    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    out = run_once(build(model(CASES[op][0]), default_target(device)), x)
    print(f"{op}: ran, output finite: {bool(np.isfinite(out).all())}")
    return 0


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", metavar="OUT.json", nargs="?")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--plain", choices=sorted(CASES), help="only build OP's model and run it once, unsanitized "
                        "(native regions): for compute-sanitizer")
    args = parser.parse_args()
    if args.plain:
        sys.exit(plain(args.plain, args.device))
    if not args.out:
        parser.error("OUT.json is needed unless --plain is given")
    sys.exit(main(args.out, args.device))
