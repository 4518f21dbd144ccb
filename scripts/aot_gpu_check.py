"""Do AOT cubins (simaccel.aot) run on a real GPU when launched from their launch plan alone?

    python scripts/aot_gpu_check.py build DIR   # here, no GPU needed: compile, write DIR/
    python scripts/aot_gpu_check.py run DIR     # on the GPU machine: load, launch, compare

`build` compiles a two-op Program (dense + bias + gelu, then softmax; float32 and float16) for
sm_90 and writes each cubin with a manifest: entry names, grids, blocks and the argument recipe.
`run` loads the cubins with the CUDA driver (no Numba compile), fills each kernel's 8-byte
parameters from the recipe alone (simaccel.aot.abi_params), launches them with
cuLaunchKernel and compares the output with the numpy references (simaccel.compare's rule,
element by element as for a kernel, the dtype's tolerance). This is what a native region
launcher does, done from Python.
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

import numpy as np

from simaccel.compare import array_difference
from simaccel.program import OpNode, Program, TensorSpec


def program(dtype: str) -> Program:
    tensors = (TensorSpec("x", (37, 70), dtype), TensorSpec("w", (66, 70), dtype), TensorSpec("b", (66,), dtype),
               TensorSpec("h", (37, 66), dtype), TensorSpec("y", (37, 66), dtype))
    ops = (OpNode("simaccel.dense_bias_gelu", (0, 1, 2), 3), OpNode("simaccel.softmax", (3,), 4))
    return Program(f"aot_check_{dtype}", tensors, (0, 1, 2), (4,), ops).validate()


def build(folder: Path) -> None:
    from simaccel.aot import compile_program, signature
    from simaccel.launch_plan import WORKSPACE, View, plan_launches

    folder.mkdir(parents=True, exist_ok=True)
    manifest = []
    for dtype in ("float32", "float16"):
        prog = program(dtype)
        compiled = compile_program(prog, (9, 0))
        launches = []
        for launch in plan_launches(prog):
            [kernel] = [k for k in compiled if k.kernel is launch.kernel and k.signature == signature(launch, prog)]
            name = f"{prog.name}_{launch.op}_{kernel.kernel.__name__}.cubin"
            (folder / name).write_bytes(kernel.cubin)
            if any(isinstance(a, View) and a.tensor == WORKSPACE for a in launch.args):
                raise SystemExit(f"{prog.name}: op {launch.op} views the region's workspace, which this check does not allocate")
            args = [{"tensor": a.tensor, "shape": list(a.shape)} if isinstance(a, View) else a for a in launch.args]
            launches.append({"cubin": name, "entry": kernel.entry, "grid": launch.grid, "block": launch.block,
                             "shared": launch.shared_bytes, "args": args})
        manifest.append({"program": prog.to_json(), "launches": launches})
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(f"wrote {sum(len(p['launches']) for p in manifest)} cubins and manifest.json to {folder}")


def _dims(value) -> tuple[int, int, int]:
    value = [value] if isinstance(value, int) else list(value)
    return tuple(value + [1] * (3 - len(value)))


def run(folder: Path) -> int:
    from cuda.bindings import driver
    from numba import cuda

    def check(result):
        error = result[0] if isinstance(result, tuple) else result
        if error != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"CUDA driver error {error}")
        return result[1] if isinstance(result, tuple) and len(result) > 1 else None

    cuda.current_context()  # the primary context, current in this thread
    ok = True
    for entry in json.loads((folder / "manifest.json").read_text()):
        prog = Program.from_json(entry["program"]).validate()
        rng = np.random.default_rng(0)
        host = {i: rng.standard_normal(prog.tensors[i].shape).astype(prog.tensors[i].dtype) for i in prog.inputs}
        device = {i: cuda.to_device(a) for i, a in host.items()}
        for i, spec in enumerate(prog.tensors):
            if i not in device:
                device[i] = cuda.device_array(spec.shape, dtype=spec.dtype)
        for launch in entry["launches"]:
            module = check(driver.cuModuleLoadData((folder / launch["cubin"]).read_bytes()))
            function = check(driver.cuModuleGetFunction(module, launch["entry"].encode()))
            values, types = [], []
            for arg in launch["args"]:
                if isinstance(arg, dict):  # meminfo, parent, nitems, itemsize, data, shape, strides
                    array = device[arg["tensor"]]
                    shape = arg["shape"]
                    itemsize = array.dtype.itemsize
                    strides = [int(np.prod(shape[k + 1:], dtype=np.int64)) * itemsize for k in range(len(shape))]
                    fields = [0, 0, int(np.prod(shape, dtype=np.int64)), itemsize,
                              array.__cuda_array_interface__["data"][0], *shape, *strides]
                    values += fields
                    types += [ctypes.c_int64] * len(fields)
                elif isinstance(arg, float):
                    values.append(arg)
                    types.append(ctypes.c_double)
                else:
                    values.append(int(arg))
                    types.append(ctypes.c_int64)
            check(driver.cuLaunchKernel(function, *_dims(launch["grid"]), *_dims(launch["block"]), launch["shared"],
                                        0, (tuple(values), tuple(types)), 0))
        check(driver.cuCtxSynchronize())
        got = device[prog.outputs[0]].copy_to_host()
        want = _reference(prog, host)
        found = array_difference(got, want)
        print(f"{prog.name}: {len(entry['launches'])} launches from cubins, max abs error vs numpy {found.max_error:.3g}"
              + ("" if found.ok else f": MISMATCH ({found.reason})"))
        ok = ok and found.ok
    print("RESULT: match" if ok else "RESULT: MISMATCH")
    return 0 if ok else 1


def _reference(prog: Program, host: dict) -> np.ndarray:
    from simaccel.ops import get_op

    values = dict(host)
    for node in prog.ops:
        op = get_op(node.op)
        values[node.output] = op.reference(*[values[i] for i in node.inputs], **op.all_attrs(node.attrs))
    return values[prog.outputs[0]]


if __name__ == "__main__":
    command, folder = sys.argv[1], Path(sys.argv[2])
    if command == "build":
        build(folder)
    else:
        sys.exit(run(folder))
