"""`simaccel bench --ops`: each op's kernel at real sizes against the GPU's limits (a roofline table).

A benchmark, not a test. Every case launches one op of the ISA through its own launcher on
the current GPU (`KernelTarget("cuda")`), checks the result against the op's numpy
reference, and times its GPU time with CUDA events (median of `repeat` samples of
LAUNCHES_PER_SAMPLE back-to-back calls queued behind a spin kernel, after warm-up: the
host's cost of a launch is not counted, see `_median_us`). A case's work
is counted from its shapes: GEMM-like ops (matmul, dense, conv2d) by their multiply-adds
(2 FLOPs each) against the GPU's FP32 peak (float16: its tensor-core peak), every other op by the bytes it must read and
write once against its memory bandwidth. A kernel that differs from its reference is marked
and makes the run exit 1. Where PyTorch is installed its equivalent
(cuBLAS or cuDNN with TF32 off, or its own elementwise kernels) is timed in the same loop,
as a peer. Writes ops.json (with the date and device) and, where matplotlib is installed,
ops.png; prints the table.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import dataclass

import numpy as np
from numba import float32

from ...errors import SimAccelError
from .bench import pyplot
from .common.torch_peer import torch_on_gpu

# FP32 (non-tensor-core) peak, dense float16 tensor-core peak (float32 accumulation) and memory
# bandwidth, from the vendors' data sheets.
LIMITS = {
    "NVIDIA H200": {"flops": 66.9e12, "flops_float16": 989.4e12, "bytes": 4.8e12},
    "NVIDIA H100 80GB HBM3": {"flops": 66.9e12, "flops_float16": 989.4e12, "bytes": 3.35e12},
}


# Calls per timed sample (see _median_us).
LAUNCHES_PER_SAMPLE = 10

# A case whose kernel differs from its reference by more than this (of the result's scale) is
# reported as a mismatch (exit 1): its time would not be the op's. 16-bit results carry
# their own rounding (float16 2^-11, bfloat16 2^-8 relative) on top of the float32
# accumulation's.
MAX_REL_ERROR = {"float32": 1e-3, "float16": 4e-3, "bfloat16": 1.6e-2}
SIXTEEN_BIT = ("float16", "bfloat16")  # on the tensor cores where GEMM-like: against their peak


def max_rel_error(case) -> float:
    return MAX_REL_ERROR[case.dtype]

@dataclass(frozen=True)
class OpCase:
    label: str
    op: str
    shapes: tuple  # input shapes in role order
    attrs: dict
    work: str  # "flops" (GEMM-like) or "bytes"
    dtype: str = "float32"


CONV = {"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1}
CASES = [
    OpCase("gemm 4096^3", "simaccel.matmul", ((4096, 4096), (4096, 4096)), {}, "flops"),
    OpCase("gemm 1024^3", "simaccel.matmul", ((1024, 1024), (1024, 1024)), {}, "flops"),
    # float16 inputs, float32 accumulation, on the tensor cores: against their peak.
    OpCase("gemm 4096^3 float16", "simaccel.matmul", ((4096, 4096), (4096, 4096)), {}, "flops", "float16"),
    OpCase("gemm 4096^3 bfloat16", "simaccel.matmul", ((4096, 4096), (4096, 4096)), {}, "flops", "bfloat16"),
    # A decoder step's linear layers (kernels/gemv.cu): LLaMA-3-8B's MLP projections (the
    # dense form, W as torch keeps it, and W^T as (K, N)), its vocabulary's logits, a batch of
    # 4; every weight larger than an H100's or H200's L2 cache (50 MB), so it streams from HBM.
    OpCase("gemv 1x4096->14336 bfloat16", "simaccel.dense", ((1, 4096), (14336, 4096)), {}, "bytes", "bfloat16"),
    OpCase("gemv 1x14336->4096 bfloat16", "simaccel.dense", ((1, 14336), (4096, 14336)), {}, "bytes", "bfloat16"),
    OpCase("gemv 1x4096->14336 (K, N) bfloat16", "simaccel.matmul", ((1, 4096), (4096, 14336)), {}, "bytes", "bfloat16"),
    OpCase("gemv 1x4096->128256 float16", "simaccel.dense", ((1, 4096), (128256, 4096)), {}, "bytes", "float16"),
    OpCase("gemv 4x4096->14336 float16", "simaccel.dense", ((4, 4096), (14336, 4096)), {}, "bytes", "float16"),
    OpCase("dense+bias+gelu 8192x3072x768", "simaccel.dense_bias_gelu", ((8192, 768), (3072, 768), (3072,)), {}, "flops"),
    OpCase("conv 56x56x64->64 3x3 b8", "simaccel.conv2d_bias_relu", ((8, 64, 56, 56), (64, 64, 3, 3), (1, 64, 1, 1)), CONV, "flops"),
    OpCase("conv 28x28x128->128 3x3 b8", "simaccel.conv2d_bias_relu", ((8, 128, 28, 28), (128, 128, 3, 3), (1, 128, 1, 1)), CONV, "flops"),
    OpCase("conv 14x14x256->256 3x3 b8", "simaccel.conv2d_bias_relu", ((8, 256, 14, 14), (256, 256, 3, 3), (1, 256, 1, 1)), CONV, "flops"),
    OpCase("depthwise 112x112x32 3x3 b8", "simaccel.conv2d", ((8, 32, 112, 112), (32, 1, 3, 3)), {**CONV, "groups": 32}, "flops"),
    # The grouped / depthwise kernel (kernels/conv2d_grouped.py): MobileNet's strided depthwise,
    # EfficientNet's 5x5, ConvNeXt's 7x7, ResNeXt's 32 groups of 4, a channel multiplier of 2.
    OpCase("depthwise 112x112x96->56 3x3/2 b8", "simaccel.conv2d", ((8, 96, 112, 112), (96, 1, 3, 3)),
           {**CONV, "strides": [2, 2], "groups": 96}, "flops"),
    OpCase("depthwise 28x28x240 5x5 b8", "simaccel.conv2d", ((8, 240, 28, 28), (240, 1, 5, 5)),
           {**CONV, "padding": [2, 2, 2, 2], "groups": 240}, "flops"),
    OpCase("depthwise 56x56x96 7x7 b8", "simaccel.conv2d", ((8, 96, 56, 56), (96, 1, 7, 7)),
           {**CONV, "padding": [3, 3, 3, 3], "groups": 96}, "flops"),
    OpCase("grouped 56x56x128 3x3 g32 b8", "simaccel.conv2d", ((8, 128, 56, 56), (128, 4, 3, 3)), {**CONV, "groups": 32},
           "flops"),
    OpCase("depthwise x2 28x28x64->128 3x3 b8", "simaccel.conv2d", ((8, 64, 28, 28), (128, 1, 3, 3)),
           {**CONV, "groups": 64}, "flops"),
    OpCase("add broadcast 64M", "simaccel.add", ((64, 1024, 1024), (1024, 1024)), {}, "bytes"),
    OpCase("relu 64M", "simaccel.relu", ((64, 1024, 1024),), {}, "bytes"),
    OpCase("softmax 32768x1024", "simaccel.softmax", ((32768, 1024),), {}, "bytes"),
    OpCase("layer_norm 32768x1024", "simaccel.layer_norm", ((32768, 1024), (1024,), (1024,)), {"epsilon": 1e-5}, "bytes"),
    OpCase("max_pool 3x3/2 b8x64x112x112", "simaccel.max_pool2d", ((8, 64, 112, 112),),
           {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1, 1, 1], "dilation": [1, 1]}, "bytes"),
    OpCase("mean spatial b64x512x56x56", "simaccel.mean", ((64, 512, 56, 56),), {"axes": [2, 3], "keepdims": True}, "bytes"),
    OpCase("permute (0,2,1,3) 64x512x16x64", "simaccel.permute_dims", ((64, 512, 16, 64),), {"axes": [0, 2, 1, 3]}, "bytes"),
    # Size classes of the bandwidth-bound kernels' other paths: short rows (a group of 8 lanes
    # a row), long rows (a block of 512 caching 8 values each), rows beyond the cache (a
    # vocabulary), the tiled transpose (NCHW -> NHWC), a reduction across a middle axis, a
    # global average pool (rows of 49 on groups of 8 lanes).
    OpCase("softmax 262144x64", "simaccel.softmax", ((262144, 64),), {}, "bytes"),
    OpCase("layer_norm 8192x4096", "simaccel.layer_norm", ((8192, 4096), (4096,), (4096,)), {"epsilon": 1e-5}, "bytes"),
    OpCase("softmax 1024x32000", "simaccel.softmax", ((1024, 32000),), {}, "bytes"),
    OpCase("permute (0,2,3,1) 8x64x112x112", "simaccel.permute_dims", ((8, 64, 112, 112),), {"axes": [0, 2, 3, 1]}, "bytes"),
    OpCase("sum axis 1 64x512x1024", "simaccel.sum", ((64, 512, 1024),), {"axes": [1], "keepdims": False}, "bytes"),
    OpCase("mean spatial b64x2048x7x7", "simaccel.mean", ((64, 2048, 7, 7),), {"axes": [2, 3], "keepdims": True}, "bytes"),
]


def work_of(case: OpCase, out_shape) -> tuple[float, float]:
    """(FLOPs, bytes) the case must do at the least: multiply-adds x 2 for GEMM-like ops, and
    every input and the output read or written once."""
    nbytes = np.dtype(case.dtype).itemsize * (sum(math.prod(s) for s in case.shapes) + math.prod(out_shape))
    if case.op.startswith(("simaccel.matmul", "simaccel.dense")):
        k = case.shapes[0][-1]
        return 2.0 * math.prod(out_shape) * k, nbytes
    if case.op.startswith("simaccel.conv2d"):
        weight = case.shapes[1]  # (O, C / groups, KH, KW): multiply-adds per output element
        return 2.0 * math.prod(out_shape) * math.prod(weight[1:]), nbytes
    return 0.0, nbytes


def roofline_row(case: OpCase, out_shape, us: float, limits: dict | None) -> dict:
    """A table row: time, achieved rate and its fraction of the limit that bounds the case."""
    flops, nbytes = work_of(case, out_shape)
    row = {"op": case.op, "shapes": [list(s) for s in case.shapes], "median_us": us, "flops": flops, "bytes": nbytes}
    if case.work == "flops":
        row["achieved"] = flops / (us * 1e-6)
        row["unit"] = "FLOP/s"
        row["limit"] = limits["flops_float16" if case.dtype in SIXTEEN_BIT else "flops"] if limits else None
    else:
        row["achieved"] = nbytes / (us * 1e-6)
        row["unit"] = "B/s"
        row["limit"] = limits["bytes"] if limits else None
    row["fraction_of_limit"] = row["achieved"] / row["limit"] if row["limit"] else None
    return row


def run_bench_ops(out_dir, repeat: int = 20, warmup: int = 3, compare_with=None, log=print) -> int:
    """Time every case, write ops.json and ops.png; with `compare_with` (an earlier ops.json)
    also compare each kernel's ratio to its torch peer (simaccel.tvm_integration.tools.bench_compare).
    Returns 1 when a kernel differs from its reference or is more than 10% worse than before."""
    from numba import cuda

    from ...engines.cuda import to_host
    from ...kernels import KernelTarget
    from .bench import compare_reports, output_folder, package_version
    from .bench_compare import KERNEL_PEER, load_report
    from .deploy import gpu_name

    old = load_report(compare_with) if compare_with else None  # a bad file fails before any timing
    if old is not None and old.peer != KERNEL_PEER:
        raise SimAccelError(f"bench --ops --compare {compare_with}: a region report (bench.json); give an ops.json")
    if not cuda.is_available():
        raise SimAccelError("bench --ops: needs an NVIDIA GPU with a working CUDA driver (numba.cuda finds none)")
    out = output_folder(out_dir)
    device = gpu_name()
    limits = LIMITS.get(device)
    if limits is None:
        log(f"bench --ops: no limits known for {device}: achieved rates only")
    target = KernelTarget("cuda")
    rows = {}
    for case in CASES:
        run = prepare_case(case, target)
        us = _median_us(run.launch, repeat, warmup)
        error = _relative_error(run.op, run.arrays, run.attrs, to_host(run.out))
        rows[case.label] = {"dtype": case.dtype} | roofline_row(case, run.out.shape, us, limits) | {
            "max_rel_error": error, "matches_reference": error <= max_rel_error(case)}
        peer = _torch_peer(case, run.arrays)
        if peer is not None:
            rows[case.label]["torch_us"] = _median_us(peer, repeat, warmup)
        log(_line(case.label, rows[case.label]))
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "device": device,
        "limits": limits,
        "versions": {pkg: package_version(pkg) for pkg in ("simaccel", "numba-cuda", "numpy", "torch")},
        "method": f"GPU time: CUDA events around {LAUNCHES_PER_SAMPLE} back-to-back launches queued behind a spin "
        f"kernel, time per launch, median of {repeat} such samples after {warmup} warm-ups; float32 unless "
        "a case names its dtype; "
        "torch peers with TF32 off, timed in the same run",
        "ops": rows,
    }
    (out / "ops.json").write_text(json.dumps(report, indent=1))
    _chart(report, out / "ops.png")
    log(f"wrote {out / 'ops.json'}")
    regressed = 0 if old is None else compare_reports(out / "ops.json", compare_with, log=log)
    wrong = [label for label, row in rows.items() if not row["matches_reference"]]
    if wrong:
        bounds = ", ".join(f"{dtype} {bound:g}" for dtype, bound in MAX_REL_ERROR.items())
        log(f"RESULT: MISMATCH: {', '.join(wrong)} differ from their references by more than ({bounds}) "
            "of the result's scale")
        return 1
    return regressed


@dataclass
class PreparedCase:
    """A case's op, attributes, host inputs and device arrays, and the call that launches it."""

    op: object
    attrs: dict
    arrays: list
    out: object
    launch: object


def prepare_case(case: OpCase, target) -> PreparedCase:
    """Random inputs for `case` (seed 1) on the GPU, its output allocated, and a call that
    launches its op's kernel on `target` (also used by scripts/profile_ops_gpu.py)."""
    from numba import cuda

    from ...data import random_arrays
    from ...engines.cuda import to_device
    from ...kernels import dtypes
    from ...ops import get_op

    op = get_op(case.op)
    attrs = op.all_attrs(case.attrs)
    arrays = random_arrays([(f"t{i}", s, case.dtype) for i, s in enumerate(case.shapes)], seed=1)
    shape, dtype = op.infer([a.shape for a in arrays], [case.dtype] * len(arrays), **attrs)
    device_in = [to_device(a) for a in arrays]
    device_out = cuda.device_array(shape, dtype=np.dtype(dtypes.numpy_dtype(dtype)))

    def launch():
        op.kernel(target, device_out, *device_in, **attrs)

    return PreparedCase(op, attrs, arrays, device_out, launch)


def _median_us(fn, repeat: int, warmup: int, launches: int = LAUNCHES_PER_SAMPLE) -> float:
    """Median over `repeat` samples of the GPU time per call of `fn`: each sample is `launches`
    calls back to back between two CUDA events, queued behind a spin kernel that keeps the GPU
    busy for twice as long as the host takes to queue them. The GPU then runs the calls one
    after the other, so a launch's host cost (tens to hundreds of microseconds for a launcher
    in Python; native regions launch from C++) is not counted as the kernel's."""
    from numba import cuda

    for _ in range(warmup):
        fn()
    cuda.synchronize()
    host = time.perf_counter()
    for _ in range(launches):
        fn()
    host = time.perf_counter() - host
    cuda.synchronize()
    spin = _spinner(2 * host)
    times = []
    for _ in range(repeat):
        spin()
        start, end = cuda.event(), cuda.event()
        start.record()
        for _ in range(launches):
            fn()
        end.record()
        end.synchronize()
        times.append(cuda.event_elapsed_time(start, end) * 1e3 / launches)
    return statistics.median(times)


def _spin_kernel(out, n):
    # One thread, a chain of n dependent multiply-adds (the result is stored, so it stays).
    v = float32(1.0)
    for _ in range(n):
        v = v * float32(0.999999) + float32(1e-7)
    out[0] = v


_SPIN_SECONDS_PER_STEP = []


def _spinner(seconds: float):
    """A call that queues a kernel keeping the GPU busy for about `seconds`."""
    from numba import cuda

    from ...kernels.target import compile_kernel

    kernel = compile_kernel(_spin_kernel, "cuda")  # compiled once
    out = cuda.device_array(1, np.float32)
    if not _SPIN_SECONDS_PER_STEP:  # calibrate once
        steps = 1 << 16
        kernel[1, 1](out, steps)
        cuda.synchronize()
        start, end = cuda.event(), cuda.event()
        start.record()
        kernel[1, 1](out, steps)
        end.record()
        end.synchronize()
        _SPIN_SECONDS_PER_STEP.append(cuda.event_elapsed_time(start, end) * 1e-3 / steps)
    steps = max(1, int(seconds / _SPIN_SECONDS_PER_STEP[0]))
    return lambda: kernel[1, 1](out, steps)


def _relative_error(op, arrays, attrs, got) -> float:
    """The kernel's largest error against the op's numpy reference, relative to the result's scale."""
    want = np.asarray(op.reference(*arrays, **attrs), dtype=np.float64)
    scale = max(float(np.abs(want).max()), 1e-30)
    return float(np.abs(got.astype(np.float64) - want).max() / scale)


def _torch_peer(case: OpCase, arrays):
    """The case in PyTorch (cuBLAS / cuDNN with TF32 off), or None without torch or an equivalent."""
    peer = torch_on_gpu(arrays)
    if peer is None:
        return None
    torch, F, t = peer
    a = case.attrs
    peers = {
        "simaccel.matmul": lambda: t[0] @ t[1],
        "simaccel.dense": lambda: F.linear(t[0], t[1]),
        "simaccel.dense_bias_gelu": lambda: F.gelu(F.linear(t[0], t[1], t[2])),
        "simaccel.conv2d_bias_relu": lambda: F.relu(_torch_conv2d(F, t[0], t[1], t[2].reshape(-1), a)),
        "simaccel.conv2d": lambda: _torch_conv2d(F, t[0], t[1], None, a),
        "simaccel.add": lambda: t[0] + t[1],
        "simaccel.relu": lambda: torch.relu(t[0]),
        "simaccel.softmax": lambda: torch.softmax(t[0], -1),
        "simaccel.layer_norm": lambda: F.layer_norm(t[0], t[0].shape[-1:], t[1], t[2], a.get("epsilon", 1e-5)),
        "simaccel.max_pool2d": lambda: F.max_pool2d(t[0], 3, 2, 1),
        "simaccel.mean": lambda: t[0].mean(tuple(a.get("axes", (2, 3))), keepdim=a.get("keepdims", True)),
        "simaccel.sum": lambda: t[0].sum(tuple(a.get("axes", ())), keepdim=a.get("keepdims", False)),
        "simaccel.permute_dims": lambda: t[0].permute(*a.get("axes", ())).contiguous(),
    }
    return peers.get(case.op)


def _torch_conv2d(F, x, w, b, attrs):
    """F.conv2d with the case's strides, padding (top, left, bottom, right; asymmetric padding
    as an F.pad first, inside the timed call), dilation and groups."""
    top, left, bottom, right = attrs.get("padding", (0, 0, 0, 0))
    if (top, left) != (bottom, right):
        x, top, left = F.pad(x, (left, right, top, bottom)), 0, 0
    return F.conv2d(x, w, b, stride=tuple(attrs.get("strides", (1, 1))), padding=(top, left),
                    dilation=tuple(attrs.get("dilation", (1, 1))), groups=attrs.get("groups", 1))


def _line(label: str, row: dict) -> str:
    rate = row["achieved"] / (1e12 if row["unit"] == "FLOP/s" else 1e9)
    unit = "TFLOP/s" if row["unit"] == "FLOP/s" else "GB/s"
    text = f"{label:<32} {row['median_us']:>10.1f} us {rate:>9.1f} {unit:<7}"
    if row["fraction_of_limit"] is not None:
        text += f" {row['fraction_of_limit']:>6.1%} of the limit"
    if not row["matches_reference"]:
        text += f"   DIFFERS FROM ITS REFERENCE ({row['max_rel_error']:.1e})"
    if "torch_us" in row:
        text += f"   torch {row['torch_us']:.1f} us (ours takes {row['median_us'] / row['torch_us']:.2f}x its time)"
    return text


def _chart(report, path) -> None:
    plt = pyplot()
    if plt is None:
        return
    labels = [k for k, v in report["ops"].items() if v["fraction_of_limit"] is not None]
    if not labels:
        return
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(labels) + 1.5))
    ax.barh(labels, [100 * report["ops"][k]["fraction_of_limit"] for k in labels])
    ax.set_xlabel("% of the limit\n(GEMM-like ops: FP32 or tensor-core peak; the rest: memory bandwidth)")
    ax.invert_yaxis()
    ax.set_title(f"simaccel kernels, {report['device']}, {report['date']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")  # long case names and the label stay inside the PNG
    plt.close(fig)
