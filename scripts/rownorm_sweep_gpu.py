"""Time layouts of the row-wise softmax and layer norm kernels on a GPU, beside torch's.

    python scripts/rownorm_sweep_gpu.py OUT_DIR [--bounds | --before OLD_normalization.py
                                                 [--ops softmax,layer_norm,row_sum] [--shapes 32768x3136,...]]

kernels/normalization.py's kernels are built by factories whose values-per-thread (`cache`)
is a parameter. Each variant here is such a kernel, compiled with numba-cuda for the GPU
present with its own launch bounds: a block per row (threads x values per thread) or a group
of lanes per row (lanes x values per lane). Each is checked against torch's float32 result,
then timed with CUDA events (median of 20 samples of 10 launches queued behind a spin kernel,
after 3 warm-ups) beside torch's softmax or layer_norm on the same tensor. Registers and local
memory per thread (spills) are recorded. Writes OUT_DIR/rownorm_sweep.json and prints a table.
With --bounds, the layouts are the ones the launchers pick and the launch bounds vary instead
(`launch_bounds` None: only the block size the launcher picks is known to no one).
With --before, the launchers themselves are compared instead: an earlier version of
kernels/normalization.py (a copy of the file, loaded in the package beside the shipped one),
the shipped launchers on 16-byte aligned tensors (vector accesses) and on views one element
off that alignment (the element-wise loop), for softmax, layer norm and row sums (or the ops and
shapes named: a short run to profile, e.g. under Nsight Compute).
"""
import functools
import importlib.util
import json
import sys
from pathlib import Path

import torch
from numba import cuda

from simaccel.kernels import KernelTarget
from simaccel.kernels import normalization as n

sys.path.insert(0, str(Path(__file__).parent))  # python -P adds no script folder
from cuda_events import events_us  # noqa: E402

HBM = 4.8e12  # bytes/s, the H200's peak: the 'of HBM' column


@functools.cache
def block_kernel(op, cache, threads, min_blocks, bounds="block"):
    factory = n._softmax_block_kernel if op == "softmax" else n._layer_norm_block_kernel
    if bounds == "block":
        bounds = (threads, min_blocks) if min_blocks else (threads,)
    layout = ("block", threads, cache, min_blocks) if bounds == "block" else ("block", threads, cache, "bounds", bounds)
    return cuda.jit(factory(False, simulator=False, cache=cache), launch_bounds=bounds), layout


@functools.cache
def rows_kernel(op, cache, lanes, block, min_blocks):
    factory = n._softmax_rows_kernel if op == "softmax" else n._layer_norm_rows_kernel
    bounds = (block, min_blocks) if min_blocks else (block,)
    return cuda.jit(factory(simulator=False, cache=cache), launch_bounds=bounds), ("rows", lanes, cache, min_blocks, block)


def bounds_variants(rows, D):
    """The launchers' block per row (ROW_CACHE values a thread) under several launch bounds."""
    out = []
    for op in ("softmax", "layer_norm"):
        shipped = n._softmax_kernel if op == "softmax" else n._layer_norm_kernel
        threads = min(n._block_size(D, rows), shipped.launch_bounds[0])
        if threads * n.ROW_CACHE < D:
            continue
        for bounds in (shipped.launch_bounds, None, (1024,), (512,), (threads,), (threads, 2048 // threads)):
            kernel, layout = block_kernel(op, n.ROW_CACHE, threads, None, bounds)
            out.append((op, kernel, ("block", threads, n.ROW_CACHE, None) + ("bounds", bounds)))
    return out


def variants(rows, D):
    """(kernel, layout) pairs whose caches hold a row of D exactly or more."""
    out = []
    for op in ("softmax", "layer_norm"):
        for cache in (4, 8, 16, 32):
            threads = max(32, D // cache)
            if threads > 1024 or threads * cache < D:
                continue
            for min_blocks in (None, max(1, 2048 // threads)):
                out.append((op, *block_kernel(op, cache, threads, min_blocks)))
        for cache in (8, 16, 32):
            lanes = D // cache
            if lanes > 32 or lanes < 1:
                continue
            for min_blocks in (None, 2048 // n.ROWS_BLOCK):
                out.append((op, *rows_kernel(op, cache, lanes, n.ROWS_BLOCK, min_blocks)))
    return out


def launch(op, kernel, layout, out, x, g, b, rows, D):
    if layout[0] == "block":
        threads = layout[1]
        args = (out, x, rows, D) if op == "softmax" else (out, x, g, b, rows, D, 1e-5)
        kernel[min(rows, 1 << 20), threads](*args)
    else:
        lanes, block = layout[1], layout[4]
        grid = min(-(-rows // (block // lanes)), 1 << 20)
        shift = lanes.bit_length() - 1
        args = (out, x, rows, D, shift) if op == "softmax" else (out, x, g, b, rows, D, 1e-5, shift)
        kernel[grid, block](*args)


def load_before(path):
    """Module of an earlier kernels/normalization.py, imported inside simaccel.kernels."""
    spec = importlib.util.spec_from_file_location("simaccel.kernels._normalization_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


VECTOR_SHAPES = [(32768, 1024), (8192, 4096), (65536, 512), (16384, 2048), (4096, 8192), (262144, 64),
                 (1024, 32000), (2048, 768), (8192, 1001), (32768, 3136)]


def compare_before(out_dir, before_path, ops=("softmax", "layer_norm", "row_sum"), shapes=VECTOR_SHAPES):
    """The launchers before and after, aligned and off the alignment, beside torch."""
    before = load_before(before_path)
    target = KernelTarget("cuda", cuda.external_stream(torch.cuda.current_stream().cuda_stream))
    results = []
    for rows, D in shapes:
        torch.manual_seed(0)
        x = torch.randn(rows, D, device="cuda")
        g = torch.rand(D, device="cuda") + 0.5
        b = torch.rand(D, device="cuda") - 0.5
        off = torch.empty(rows * D + 1, device="cuda")[1:].view(rows, D)  # 4 bytes past 16-byte alignment
        off.copy_(x)
        out = torch.empty_like(x)
        out_off = torch.empty(rows * D + 1, device="cuda")[1:].view(rows, D)
        sums, sums_off = torch.empty(rows, device="cuda"), torch.empty(rows, device="cuda")
        A = cuda.as_cuda_array
        peers = {"softmax": lambda: torch.softmax(x, -1),
                 "layer_norm": lambda: torch.nn.functional.layer_norm(x, (D,), g, b, 1e-5),
                 "row_sum": lambda: x.sum(-1)}
        ours = {
            "softmax": {"before": lambda m=before: m.launch_softmax(target, A(out), A(x)),
                        "shipped": lambda: n.launch_softmax(target, A(out), A(x)),
                        "shipped, off alignment": lambda: n.launch_softmax(target, A(out_off), A(off))},
            "layer_norm": {"before": lambda m=before: m.launch_layer_norm(target, A(out), A(x), A(g), A(b), epsilon=1e-5),
                           "shipped": lambda: n.launch_layer_norm(target, A(out), A(x), A(g), A(b), epsilon=1e-5),
                           "shipped, off alignment": lambda: n.launch_layer_norm(target, A(out_off), A(off), A(g), A(b),
                                                                                 epsilon=1e-5)},
            "row_sum": {"before": lambda m=before: m.launch_row_sums(target, A(sums), A(x), mean=False),
                        "shipped": lambda: n.launch_row_sums(target, A(sums), A(x), mean=False),
                        "shipped, off alignment": lambda: n.launch_row_sums(target, A(sums_off), A(off), mean=False)},
        }
        for op, peer in peers.items():
            if op not in ops:
                continue
            want = peer()
            torch_us = events_us(peer)
            moved = (rows * D + (rows if op == "row_sum" else rows * D)) * 4
            for label, fn in ours[op].items():
                fn()
                torch.cuda.synchronize()
                got = {"softmax": out, "layer_norm": out, "row_sum": sums}[op]
                if "off" in label:
                    got = {"softmax": out_off, "layer_norm": out_off, "row_sum": sums_off}[op]
                row = {"op": op, "rows": rows, "D": D, "variant": label, "torch_us": torch_us,
                       "max_error": float((got - want).abs().max()), "us": events_us(fn)}
                row["hbm_percent"] = moved / (row["us"] * 1e-6) / HBM * 100
                results.append(row)
                print(f"{op:10} {rows:6}x{D:<5} {label:24} {row['us']:8.1f} us {row['hbm_percent']:5.1f}% HBM"
                      f"  torch {torch_us:7.1f} us  x{row['us'] / torch_us:.2f}  err {row['max_error']:.1e}", flush=True)
    info = {"device": torch.cuda.get_device_name(), "results": results}
    (Path(out_dir) / "rownorm_before_after.json").write_text(json.dumps(info, indent=1))


def main(out_dir, bounds=False):
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for rows, D in [(32768, 1024), (8192, 4096), (65536, 512), (16384, 2048)] + ([(4096, 8192), (2048, 768)] if bounds else []):
        torch.manual_seed(0)
        x = torch.randn(rows, D, device="cuda")
        g = torch.rand(D, device="cuda") + 0.5
        b = torch.rand(D, device="cuda") - 0.5
        flat = x.reshape(-1)
        peers = {"softmax": (lambda: torch.softmax(x, -1)),
                 "layer_norm": (lambda: torch.nn.functional.layer_norm(x, (D,), g, b, 1e-5))}
        want = {op: fn() for op, fn in peers.items()}
        torch_us = {op: events_us(fn) for op, fn in peers.items()}
        # What kernels/normalization.py launches today, through its launchers.
        target = KernelTarget("cuda", cuda.external_stream(torch.cuda.current_stream().cuda_stream))
        xs, outs = cuda.as_cuda_array(x), cuda.as_cuda_array(torch.empty_like(x))
        shipped = {"softmax": lambda: n.launch_softmax(target, outs, xs),
                   "layer_norm": lambda: n.launch_layer_norm(target, outs, xs, cuda.as_cuda_array(g), cuda.as_cuda_array(b),
                                                             epsilon=1e-5)}
        for op, fn in shipped.items():
            fn()
            torch.cuda.synchronize()
            got = torch.as_tensor(outs, device="cuda")
            row = {"op": op, "rows": rows, "D": D, "layout": "shipped", "torch_us": torch_us[op],
                   "max_error": float((got - want[op]).abs().max()), "us": events_us(fn)}
            results.append(row)
            print(f"{op:10} {rows:6}x{D:<5} {'shipped':34} {row['us']:8.1f} us  torch {row['torch_us']:7.1f} us"
                  f"  x{row['us'] / row['torch_us']:.2f}  err {row['max_error']:.1e}", flush=True)
        for op, kernel, layout in (bounds_variants if bounds else variants)(rows, D):
            out = torch.empty(rows * D, device="cuda")
            row = {"op": op, "rows": rows, "D": D, "layout": layout, "torch_us": torch_us[op]}
            try:
                launch(op, kernel, layout, out, flat, g, b, rows, D)
                torch.cuda.synchronize()
                row["max_error"] = float((out.reshape(rows, D) - want[op]).abs().max())
                row["us"] = events_us(lambda: launch(op, kernel, layout, out, flat, g, b, rows, D))
                compiled = next(iter(kernel.overloads.values()))
                row["registers"] = compiled.regs_per_thread
                row["local_bytes"] = compiled.local_mem_per_thread
            except Exception as e:  # a layout the GPU refuses (too many registers for its bounds)
                row["error"] = f"{type(e).__name__}: {e}"[:300]
            results.append(row)
            if "us" in row:
                moved = 2 * rows * D * 4
                print(f"{op:10} {rows:6}x{D:<5} {str(layout):34} {row['us']:8.1f} us {moved / (row['us'] * 1e-6) / HBM * 100:5.1f}% HBM"
                      f"  torch {row['torch_us']:7.1f} us  x{row['us'] / row['torch_us']:.2f}  regs {row['registers']:3}"
                      f" local {row['local_bytes']}  err {row['max_error']:.1e}", flush=True)
            else:
                print(f"{op:10} {rows:6}x{D:<5} {str(layout):34} {row['error']}", flush=True)
    info = {"device": torch.cuda.get_device_name(), "results": results}
    (out_dir / "rownorm_sweep.json").write_text(json.dumps(info, indent=1))


if __name__ == "__main__":
    if "--before" in sys.argv[2:]:
        Path(sys.argv[1]).mkdir(parents=True, exist_ok=True)
        def option(name):
            return sys.argv[sys.argv.index(name) + 1].split(",") if name in sys.argv else None
        shapes = [tuple(int(d) for d in s.split("x")) for s in option("--shapes") or []] or VECTOR_SHAPES
        compare_before(sys.argv[1], sys.argv[sys.argv.index("--before") + 1],
                       option("--ops") or ("softmax", "layer_norm", "row_sum"), shapes)
    else:
        main(sys.argv[1], "--bounds" in sys.argv[2:])
