"""Ahead-of-time kernels (simaccel.aot): every op's launch plan compiled to PTX and a cubin for
an H100/H200 (sm_90) on this machine, which has no GPU and no driver."""

from __future__ import annotations

import re

import pytest

import forks
from conftest import HAS_GPU
from simaccel.aot import abi_params, compile_kernel, compile_program, signature, toolchain_missing
from simaccel.launch_plan import plan_launches
from gpu_cases import one_op_program
from test_launch_plan import CASES

SM90 = (9, 0)


def test_the_toolchain_is_installed():
    """The test extra brings NVVM, NVRTC and nvJitLink: AOT is tested, never skipped, in CI."""
    assert toolchain_missing() is None


def entry_params(ptx: str) -> int:
    """How many parameters the PTX's kernel entry declares."""
    head = ptx.split(".entry", 1)[1].split(")", 1)[0]
    return sum(".param" in line for line in head.splitlines())


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("name, shapes, attrs", CASES, ids=[c[0] for c in CASES])
def test_every_op_compiles_for_sm90_without_a_gpu(name, shapes, attrs, dtype):
    program = one_op_program(name, shapes, dtype, attrs)
    launches = plan_launches(program)
    compiled = compile_program(program, SM90)
    assert len(compiled) == len({(launch.kernel, signature(launch, program)) for launch in launches}) >= 1
    for launch in launches:
        [kernel] = [k for k in compiled if k.kernel is launch.kernel and k.signature == signature(launch, program)]
        assert ".target sm_90" in kernel.ptx and kernel.cubin[:4] == b"\x7fELF"
        # The argument layout a native launcher fills: 8 bytes per parameter, arrays expanded.
        assert entry_params(kernel.ptx) == abi_params(launch)
        assert kernel.entry in kernel.ptx


def no_spills(kernel) -> dict:
    """The shipped cubin's resources (from its own link's log), asserting it spills nothing."""
    used = kernel.resources
    assert used["spill_stores"] == 0 and used["spill_loads"] == 0, (kernel.kernel.__name__, kernel.arch, used)
    return used


@pytest.mark.parametrize("dtype", ["float32"])
@pytest.mark.parametrize("name, data, weight", [("simaccel.matmul_bias_gelu", (4096, 64), (64, 4096)),
                                               ("simaccel.dense_bias_gelu", (4096, 64), (4096, 64)),
                                               ("simaccel.matmul_relu", (2, 8, 64, 64), (2, 8, 64, 64)),
                                               ("simaccel.dense", (1024, 16), (1024, 16)),
                                               ("simaccel.dense_bias_relu", (64, 64), (64, 64)),
                                               ("simaccel.matmul", (2, 3, 40, 96), (2, 3, 96, 40)),
                                               ("simaccel.dense_bias_gelu", (1, 1280), (1000, 1280)),
                                               ("simaccel.matmul_relu", (3, 515), (515, 70))])
def test_matmul_kernels_keep_their_accumulators_in_registers(name, data, weight, dtype):
    """The four tilings and both forms of B, with an activation epilogue, batched too: no local
    memory and at most 128 registers (two 256-thread blocks per SM). A 128x128 kernel with
    both failing ran at 14.3 TFLOP/s on the H200, this one at 18.4
    (results/gpu/2026-11-30-h200-gemm/)."""
    from simaccel.kernels.matmul import tiling

    n = weight[-1] if "matmul" in name else weight[-2]
    program = one_op_program(name, [data, weight] + [(n,)] * ("_bias" in name), dtype)
    [kernel] = compile_program(program, SM90)
    batches = data[0] * data[1] if len(data) == 4 else 1
    rows = data[-2] if len(data) == 4 else data[0] * (data[1] if len(data) == 3 else 1)
    want = tiling(rows, n, data[-1], batches)
    assert kernel.kernel.__name__.endswith({"large": "128x128", "small": "64x64", "sliced": "sliced_32_kernel_32x32",
                                          "gemv": "gemv_kernel_4x8"}[want])
    used = no_spills(kernel)
    assert used["stack"] == 0 and used["registers"] <= 128, (kernel.kernel.__name__, used)


@pytest.mark.parametrize("arch", [SM90, (7, 5)], ids=lambda a: f"sm_{a[0]}{a[1]}")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name, data, weight", [("simaccel.dense_bias_gelu", (1, 4096), (14336, 4096)),
                                               ("simaccel.matmul", (4, 4096), (4096, 1000))])
def test_16_bit_gemvs_stream_their_weight_in_16_byte_loads(name, data, weight, dtype, arch):
    """A 16-bit GEMM of at most 4 rows (a decoder step's linear layer) takes the GEMV
    (kernels/gemv.cu), not a 128-row tensor-core tile: its C++ loop inlined, the weight read 8
    values to a 16-byte load, float32 sums, no local memory; sm_75, without bfloat16
    arithmetic, converts in software."""
    n = weight[-1] if "matmul" in name else weight[-2]
    program = one_op_program(name, [data, weight] + [(n,)] * ("_bias" in name), dtype)
    [kernel] = compile_program(program, arch)
    assert kernel.kernel.__name__.endswith(f"gemv_kernel_4x8_{dtype}"), kernel.kernel.__name__
    assert re.search(r"ld\.global(\.nc)?\.v4\.[bu]32", kernel.ptx), "no 16-byte loads"
    assert "call" not in kernel.ptx.replace("callseq", "")  # all inlined
    used = no_spills(kernel)
    assert used["stack"] == 0 and used["registers"] <= 128, used


# (op, data, weight, tile width): 4096 x 4096 results take 128 x 256 tiles, 1024 x 1024 ones 128 x 128.
TENSOR_CORE_CASES = [("simaccel.matmul_bias_gelu", (4096, 64), (64, 4096), 256),
                     ("simaccel.dense_bias_gelu", (4096, 64), (4096, 64), 256),
                     ("simaccel.matmul_bias_gelu", (1024, 64), (64, 1024), 128),
                     ("simaccel.dense_bias_gelu", (1024, 64), (1024, 64), 128)]


def _tensor_core_kernel(name, data, weight, bn, arch=SM90, dtype="float16"):
    n = weight[-1] if "matmul" in name else weight[-2]
    program = one_op_program(name, [data, weight, (n,)], dtype)
    [kernel] = compile_program(program, arch)
    assert kernel.kernel.__name__.endswith(f"_tensor_core_kernel_{bn}" + ("" if dtype == "float16" else f"_{dtype}"))
    return program, kernel


# The tensor-core operand dtypes and their instructions' type infix (mma.sync, wgmma).
MMA_TYPES = {"float16": "f16.f16", "bfloat16": "bf16.bf16"}


@pytest.mark.parametrize("dtype", sorted(MMA_TYPES))
@pytest.mark.parametrize("name, data, weight, bn", TENSOR_CORE_CASES)
def test_tensor_core_matmul_kernels_use_tensor_cores(name, data, weight, bn, dtype):
    """The CUDA C++ main loop (kernels/tensor_core.cu) is linked into the Numba kernel with
    link-time optimisation: inlined (no call left), with mma, ldmatrix and cp.async in the
    portable PTX, no spills; its bn / 2 accumulators cross into the Numba epilogue through a
    stack frame of 4 bytes each. Its stage buffers are dynamic shared memory, as much as the
    kernel function says for each target."""
    from simaccel.kernels.tensor_core import dynamic_shared_bytes

    _, kernel = _tensor_core_kernel(name, data, weight, bn, dtype=dtype)
    for instruction in (f"mma.sync.aligned.m16n8k16.row.col.f32.{MMA_TYPES[dtype]}.f32", "ldmatrix.sync.aligned.m8n8.x4",
                        "cp.async.cg.shared.global", "%dynamic_smem_size"):
        assert instruction in kernel.ptx, instruction
    assert "simaccel_mma_tile" not in kernel.ptx and "call" not in kernel.ptx.replace("callseq", "")  # all inlined
    used = no_spills(kernel)
    assert used["stack"] <= 4 * bn // 2 and used["registers"] <= 255, used
    assert kernel.cubin_target == (9, 0, "a")
    assert (kernel.shared_bytes, kernel.ptx_shared_bytes) == (dynamic_shared_bytes(bn, (9, 0, "a")),
                                                             dynamic_shared_bytes(bn, (9, 0)))


@pytest.mark.parametrize("dtype", sorted(MMA_TYPES))
@pytest.mark.parametrize("name, data, weight, bn", TENSOR_CORE_CASES)
def test_tensor_core_matmul_cubins_for_sm90_use_warpgroup_mma(name, data, weight, bn, dtype, tmp_path):
    """The sm_90 cubin is linked for sm_90a, whose main loop is wgmma.m64n{bn}k16 from shared
    memory (both forms of B: K-major and the (K, N) form's N-major), without spills; the
    shipped PTX stays portable (mma.sync, no wgmma), so a GPU newer than sm_90 JITs it. The
    SASS is read with cuobjdump where one is installed."""
    import shutil
    import subprocess

    from simaccel import aot
    from simaccel.kernels.target import launch_bounds

    program, kernel = _tensor_core_kernel(name, data, weight, bn, dtype=dtype)
    assert "wgmma" not in kernel.ptx and "mma.sync" in kernel.ptx
    assert b"sm_90a" in kernel.cubin
    used = no_spills(kernel)
    assert used["stack"] <= 4 * bn // 2, used
    # The cubin's inputs (the kernel's LTO-IR, the C++ compiled for sm_90a) linked to PTX:
    # wgmma, behind the proxy fence that lets it read what cp.async wrote.
    [launch] = plan_launches(program)
    library = aot._frontend(launch.kernel, kernel.signature, launch_bounds(launch.kernel, SM90), False, True, SM90)
    inputs = [(bytes(library.get_ltoir(cc=SM90)), "LTOIR")]
    inputs += [(aot._nvrtc_compile(name, text, (9, 0, "a")), "LTOIR") for name, text in aot._cpp_sources(library)]
    specific = aot._link(inputs, (9, 0, "a"), launch.kernel.__name__, ptx=True)[0].decode()
    assert f"wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.{MMA_TYPES[dtype]}" in specific and "mma.sync" not in specific
    assert "fence.proxy.async.shared::cta" in specific
    cuobjdump = shutil.which("cuobjdump")
    if cuobjdump:
        (tmp_path / "kernel.cubin").write_bytes(kernel.cubin)
        sass = subprocess.run([cuobjdump, "-sass", str(tmp_path / "kernel.cubin")], capture_output=True, text=True,
                              check=True).stdout
        assert f"HGMMA.64x{bn}x16.F32" in sass and "HMMA" not in sass


# (query, key/value) shapes of the tensor-core attention tiles: head dims 64 and 128, grouped heads.
ATTENTION_TILE_CASES = [((2, 70, 8, 128), (2, 90, 2, 128)), ((1, 1, 4, 64), (1, 4096, 4, 64))]


@pytest.mark.parametrize("query, kv", ATTENTION_TILE_CASES, ids=str)
def test_float32_attention_runs_the_one_warp_kernel_without_spills(query, kv):
    """float32 attention compiles to the one-warp-per-row kernel (shuffles, the query row in
    shared memory, no local memory); a decode step against 4096 keys to its split kernel and the
    combining one."""
    program = one_op_program("simaccel.attention", [query, kv, kv], "float32",
                             {"scale": 0.1, "causal": True, "bottom_right": True})
    kernel, *combine = compile_program(program, SM90)
    split = query[1] == 1
    assert kernel.kernel.__name__ == ("_attention_split_kernel" if split else "_attention_kernel")
    assert [c.kernel.__name__ for c in combine] == (["_combine_kernel"] if split else [])
    assert "shfl.sync" in kernel.ptx and "ld.local" not in kernel.ptx and "st.local" not in kernel.ptx
    assert no_spills(kernel)["stack"] == 0


@pytest.mark.parametrize("biased", [False, True], ids=["", "bias"])
@pytest.mark.parametrize("arch", [SM90, (8, 0), (7, 5)], ids=lambda a: f"sm_{a[0]}{a[1]}")
@pytest.mark.parametrize("dtype", sorted(MMA_TYPES))
@pytest.mark.parametrize("query, kv", ATTENTION_TILE_CASES, ids=str)
def test_attention_tiles_use_tensor_cores_without_spills(query, kv, dtype, arch, biased):
    """float16 and bfloat16 attention with equal head dims 64 or 128 runs kernels/attention.cu's
    tile, inlined into the Numba kernel: mma.sync, ldmatrix(.trans) and cp.async from sm_80 on,
    no spill and no stack (its accumulators live in registers), dynamic shared memory as the
    kernel function says; below sm_80 the same entry without tensor cores, staging nothing (a
    thread's row of accumulators is then a stack frame of 4 bytes each). A decode step against
    4096 keys takes the split kernel (the same tile writing float32 shares) and the combining one.
    With a padding mask as its bias, the tile's `_bias` entry, under the same limits."""
    from simaccel.kernels.attention import dynamic_shared_bytes

    bias = [(query[0], 1, 1, kv[1])] if biased else []
    program = one_op_program("simaccel.attention_bias" if biased else "simaccel.attention", [query, kv, kv, *bias],
                             dtype, {"scale": 0.1, "causal": True, "bottom_right": True})
    kernel, *combine = compile_program(program, arch)
    d, split = query[-1], query[1] == 1  # the decode step's keys are split over blocks, then combined
    name = ("split" if split else "tile") + ("_kernel_bias" if biased else "_kernel")
    assert kernel.kernel.__name__ == f"_attention_{name}_d{d}" + ("" if dtype == "float16" else f"_{dtype}")
    assert [c.kernel.__name__ for c in combine] == (["_combine_kernel"] if split else [])
    assert "simaccel_attention" not in kernel.ptx and "call" not in kernel.ptx.replace("callseq", "")  # inlined
    used = no_spills(kernel)
    tensor_cores = arch >= (8, 0)
    assert used["stack"] <= (0 if tensor_cores else 4 * d) and used["registers"] <= 255, used
    for instruction in (f"mma.sync.aligned.m16n8k16.row.col.f32.{MMA_TYPES[dtype]}.f32", "ldmatrix.sync.aligned.m8n8.x4.trans",
                        "cp.async.cg.shared.global"):
        assert (instruction in kernel.ptx) == tensor_cores, instruction
    assert kernel.shared_bytes == dynamic_shared_bytes(d, kernel.cubin_target) == (320 * d * 2 if tensor_cores else 0)


def test_the_attention_tile_without_a_bias_has_no_code_to_read_one():
    """The bias is a template parameter of attention.cu's tile: only the `_bias` entries load
    it (reading it in every tile made unbiased attention 38% slower on an H100,
    results/gpu/2026-12-07-h100-bias-tile-gemv/), so the plain tile has fewer global loads."""
    import re

    query, kv = ATTENTION_TILE_CASES[0]
    loads = {}
    for name, bias in (("simaccel.attention", []), ("simaccel.attention_bias", [(query[0], 1, 1, kv[1])])):
        program = one_op_program(name, [query, kv, kv, *bias], "float16", {"scale": 0.1, "causal": True, "bottom_right": True})
        kernel, *_ = compile_program(program, SM90)
        loads[name] = len(re.findall(r"\bld\.global", kernel.ptx))
    assert loads["simaccel.attention"] < loads["simaccel.attention_bias"], loads


@pytest.mark.parametrize("dtype", sorted(MMA_TYPES))
def test_tensor_core_matmul_kernels_compile_for_gpus_without_tensor_cores(dtype):
    # sm_75 has neither m16n8k16 nor cp.async: the same C++ entry computes with float32 FMAs.
    for case in TENSOR_CORE_CASES[1::2]:
        _, kernel = _tensor_core_kernel(*case, arch=(7, 5), dtype=dtype)
        assert "mma.sync" not in kernel.ptx and "cp.async" not in kernel.ptx and kernel.cubin
        assert kernel.shared_bytes == kernel.ptx_shared_bytes == 0  # it stages nothing


@pytest.mark.parametrize("arch", [(7, 5), (8, 0), SM90], ids=lambda a: f"sm_{a[0]}{a[1]}")
def test_int8_and_widening_matmuls_compile_for_every_tensor_core_generation(arch):
    """int8 operands (kernels/matmul_int8.py): dp4a, no spills, no stack, from sm_75 on; float16
    and bfloat16 widened to float32: the tensor-core kernels with a float32 output."""
    for name, shapes in (("simaccel.matmul", [(2, 3, 70, 37), (3, 37, 67)]), ("simaccel.dense", [(70, 37), (67, 37)])):
        [kernel] = compile_program(one_op_program(name, shapes, "int8", {"out_dtype": "int32"}), arch)
        assert "_int8_kernel" in kernel.kernel.__name__ and "dp4a.s32.s32" in kernel.ptx
        assert no_spills(kernel)["stack"] == 0
    for dtype in MMA_TYPES:
        program = one_op_program("simaccel.dense", [(300, 64), (256, 64)], dtype, {"out_dtype": "float32"})
        [kernel] = compile_program(program, arch)
        assert "_tensor_core_kernel_" in kernel.kernel.__name__ and program.tensors[-1].dtype == "float32"
        assert ("mma.sync" in kernel.ptx) == (arch >= (8, 0))  # sm_75: float32 FMAs
        no_spills(kernel)


CONV = {"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_conv2d_sliced_kernel_compiles_without_spills(dtype):
    """A batch-1 stage's convolution (16 tiles of 64 x 64) takes the sliced 32 x 32 kernel: four
    groups' double buffers of 16 x 36 and 16 x 32 floats, and the 32 x 33 result tile."""
    program = one_op_program("simaccel.conv2d_bias_relu", [(1, 256, 14, 14), (256, 256, 3, 3), (1, 256, 1, 1)],
                             dtype, CONV)
    [kernel] = compile_program(program, SM90)
    assert kernel.kernel.__name__ == f"_conv2d_sliced_kernel_32x32_{dtype}"
    used = no_spills(kernel)
    assert used["stack"] == 0 and used["registers"] <= 128, used
    assert f"{4 * 2 * 16 * (36 + 32) * 4 + 32 * 33 * 4} bytes smem" in kernel.link_log, kernel.link_log


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("channels", [256, 3])
def test_conv2d_gemm_kernels_keep_their_accumulators_in_registers(channels, dtype):
    """The implicit-GEMM conv2d, bias and ReLU fused, both orders of K: channels inner on the
    C++ K loop of conv2d_f32.cu (linked, double-buffered in shared memory), the other on Numba's."""
    program = one_op_program("simaccel.conv2d_bias_relu", [(32, channels, 14, 14), (256, channels, 3, 3), (1, 256, 1, 1)],
                             dtype, CONV)
    [kernel] = compile_program(program, SM90)
    assert kernel.kernel.__name__ == "_conv2d_gemm_kernel_64x64" + (f"_channels_inner_{dtype}" if channels == 256 else "")
    if channels == 256:  # two buffers of 16 x 68 and 16 x 64 floats and the epilogue's stash (16 KiB)
        assert f"{2 * 16 * (68 + 64) * 4 + 16384} bytes smem" in kernel.link_log, kernel.link_log
    used = no_spills(kernel)
    assert used["stack"] == 0 and used["registers"] <= 128, (kernel.kernel.__name__, used)


@pytest.mark.parametrize("name, shapes, dtype", [
    ("simaccel.conv2d_bias_relu", [(1, 256, 14, 14), (256, 256, 3, 3), (1, 256, 1, 1)], "float32"),  # sliced K
    ("simaccel.conv2d_bias_relu", [(32, 256, 14, 14), (256, 256, 3, 3), (1, 256, 1, 1)], "float16"),
    ("simaccel.dense", [(64, 4096), (64, 4096)], "float32"),  # sliced K
    ("simaccel.matmul_bias_gelu", [(4096, 64), (64, 4096), (4096,)], "float32"),
    ("simaccel.dense_bias_gelu", [(1024, 64), (1024, 64), (1024,)], "float16")])  # tensor cores
def test_numba_cuda_links_the_cpp_main_loops_at_run_time(name, shapes, dtype, monkeypatch):
    """The "cuda" target's own compile (kernels/target.py: numba-cuda compiles a kernel and its
    CUDA C++ when it is first launched) links every C++ main loop: each file is handed over as
    its text named by its path (`cpp_link`), so NVRTC finds kernels/sliced_k.cuh beside
    matmul_f32.cu and conv2d_f32.cu (numba-cuda reads a file given as a path under its base
    name, where the header is not found), and a kernel's file and its declared device
    functions' are linked once. Run without a GPU: aot.compile_for stands in an sm_90 device,
    and the code library is told its compute capability, which numba-cuda asks a driver for."""
    from numba.cuda import codegen
    from numba.cuda.dispatcher import _Kernel

    from simaccel.aot import compile_for
    from simaccel.kernels.target import cpp_link, launch_bounds, link_sources

    monkeypatch.setattr(codegen.CUDACodeLibrary, "_ensure_cc", lambda self, cc: cc or SM90)
    program = one_op_program(name, shapes, dtype, CONV if "conv2d" in name else {})
    [launch] = plan_launches(program)
    assert link_sources(launch.kernel)
    with compile_for(SM90):  # lto as cuda.jit chooses it where nvJitLink is installed
        kernel = _Kernel(launch.kernel, signature(launch, program), link=cpp_link(link_sources(launch.kernel)),
                         lto=True, launch_bounds=launch_bounds(launch.kernel, SM90))
        cubin = bytes(kernel._codelibrary.get_cubin(cc=SM90).code)
    assert cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("name, shapes, attrs", [("simaccel.gelu", [(64, 32)], {}), ("simaccel.add", [(64, 32), (32,)], {}),
                                                 ("simaccel.clip", [(64, 32)], {"min": 0.0, "max": 6.0}),
                                                 ("simaccel.permute_dims", [(4, 5, 6, 7)], {"axes": [0, 2, 1, 3]}),
                                                 ("simaccel.permute_dims", [(64, 512, 16, 64)], {"axes": [0, 2, 1, 3]}),
                                                 ("simaccel.permute_dims", [(8, 64, 112, 112)], {"axes": [0, 2, 3, 1]}),
                                                 ("simaccel.permute_dims", [(8, 112, 112, 3)], {"axes": [0, 3, 1, 2]}),
                                                 ("simaccel.softmax", [(64, 1024)], {}),
                                                 ("simaccel.layer_norm", [(64, 1024), (1024,), (1024,)], {"epsilon": 1e-5}),
                                                 ("simaccel.softmax", [(4096, 1024)], {}),  # a block of 128 cached
                                                 ("simaccel.layer_norm", [(4096, 1024), (1024,), (1024,)],
                                                  {"epsilon": 1e-5}),
                                                 ("simaccel.softmax", [(4096, 64)], {}),  # 8 lanes a row
                                                 ("simaccel.layer_norm", [(4096, 256), (256,), (256,)], {"epsilon": 1e-5}),
                                                 ("simaccel.softmax", [(1024, 20000)], {}),  # the long-row kernels
                                                 ("simaccel.layer_norm", [(1024, 20000), (20000,), (20000,)],
                                                  {"epsilon": 1e-5}),
                                                 ("simaccel.mean", [(64, 512, 56, 56)], {"axes": [2, 3], "keepdims": True}),
                                                 ("simaccel.mean", [(64, 2048, 7, 7)], {"axes": [2, 3], "keepdims": True}),
                                                 ("simaccel.sum", [(64, 512, 49)], {"axes": [1], "keepdims": False}),
                                                 ("simaccel.max_pool2d", [(8, 64, 112, 112)],
                                                  {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1, 1, 1],
                                                   "dilation": [1, 1]})])
def test_bandwidth_kernels_keep_their_loads_in_registers(name, shapes, attrs, dtype):
    """The values a thread loads before it stores any (ILP elements, or its row cache) stay
    in registers (no local memory, no stack), within the kernels' launch bounds; the grouped
    row kernels' reductions in shuffles (5 steps each, unrolled), the block kernels' too."""
    [kernel] = compile_program(one_op_program(name, shapes, dtype, attrs), SM90)
    used = no_spills(kernel)
    assert used["stack"] == 0, (kernel.kernel.__name__, used)
    if name in ("simaccel.softmax", "simaccel.layer_norm"):
        grouped = kernel.kernel.__name__.endswith("_rows_kernel")
        assert grouped == (shapes[0][0] >= 1024 and shapes[0][-1] <= 256)
        # Two copies of the row loop (vector accesses or not, kernels/vector.py), each with its
        # reductions: 2 x (5 shuffle steps) for a group per row, 2 x (2 x 5) for a block.
        assert kernel.ptx.count("shfl.sync") == 2 * (10 if grouped else 20), used
        wide = "v4.f32" if dtype == "float32" else "v4.u16"  # 4 values: 16 and 8 bytes an access
        assert f"ld.global.{wide}" in kernel.ptx and f"st.global.{wide}" in kernel.ptx, used
        # Layer norm's long-row kernel runs blocks of 256: 128 registers.
        assert used["registers"] <= (128 if kernel.kernel.__name__ == "_layer_norm_long_kernel" else 64), used
    if kernel.kernel.__name__ == "_row_sum_rows_kernel":  # a global average pool's 7 x 7 rows
        assert "shfl.sync" in kernel.ptx and "bar.sync" not in kernel.ptx and used["registers"] <= 64, used
    bound = {"simaccel.gelu": 85, "simaccel.permute_dims": 64}.get(name)
    if bound:
        assert used["registers"] <= bound, used


# The vector instruction one 16-byte (or 4-element) access of each element size compiles to.
VECTOR_ACCESS = {"bool": "v4.u8", "int8": "v4.u8", "float16": "v4.u16", "float32": "v4.f32", "float64": "v2.f64",
                 "int64": "v2.u64"}


@pytest.mark.parametrize("dtype", list(VECTOR_ACCESS))
@pytest.mark.parametrize("name, inputs", [("simaccel.relu", 1), ("simaccel.clip", 1), ("simaccel.add", 2),
                                          ("simaccel.softmax", 1), ("simaccel.sum", 1)])
def test_vector_accesses_compile_for_every_element_size(name, inputs, dtype):
    """The kernels with vector copies compile for arrays of any element size, not only the
    ISA's float32 and float16: Programs outside the ISA reach them (the sanitizer's tests run a
    float64 and an int32 relu), and the element copy of a 1-byte array or the vector copy of a
    32-byte one (four float64s: two 16-byte accesses) once failed to type."""
    import re

    from simaccel.program import OpNode, Program, TensorSpec

    attrs = {"min": 0.0, "max": 1.0} if name == "simaccel.clip" else {"axes": [1], "keepdims": False} if name == "simaccel.sum" else {}
    out_shape = (3,) if name == "simaccel.sum" else (3, 8)
    specs = tuple(TensorSpec(f"x{i}", (3, 8), dtype) for i in range(inputs)) + (TensorSpec("y", out_shape, dtype),)
    program = Program(f"{dtype}_program", specs, tuple(range(inputs)), (inputs,),
                      (OpNode(name, tuple(range(inputs)), inputs, attrs),))
    [launch] = plan_launches(program)
    kernel = compile_kernel(launch.kernel, signature(launch, program), SM90)
    no_spills(kernel)
    assert f"ld.global.{VECTOR_ACCESS[dtype]}" in kernel.ptx, sorted(set(re.findall(r"\w+\.global\.v\d\.\w+", kernel.ptx)))


def test_a_user_op_compiles_like_a_built_in_one(isolated_isa, monkeypatch):
    import pathlib

    monkeypatch.setenv("SIMACCEL_OPS", str(pathlib.Path(__file__).parents[1] / "examples" / "rms_norm_op.py"))
    program = one_op_program("myaccel.rms_norm", [(3, 5, 16), (16,)], "float16", {"epsilon": 1e-5})
    [kernel] = compile_program(program, SM90)
    assert kernel.kernel.__name__ == "rms_norm_kernel" and kernel.cubin[:4] == b"\x7fELF"
    assert entry_params(kernel.ptx) == abi_params(plan_launches(program)[0])


@pytest.mark.skipif(HAS_GPU, reason="on a machine with a driver numba finds a current device")
def test_device_functions_need_the_target_architecture_stood_in():
    """Why `compile_for` exists: without it numba asks the (absent) driver for the current device
    while it compiles a device function a kernel calls (here a fresh one, so nothing is cached)."""
    from numba import cuda, types
    from numba.cuda.cudadrv.error import CudaSupportError

    @cuda.jit(device=True)
    def twice(v):
        return v * 2

    def kernel(out, x):
        i = cuda.grid(1)
        if i < x.size:
            out[i] = twice(x[i])

    sig = (types.float32[::1], types.float32[::1])
    with pytest.raises(CudaSupportError):
        cuda.compile_ptx(kernel, sig, cc=SM90)
    assert compile_kernel(kernel, sig, SM90).cubin[:4] == b"\x7fELF"


def test_the_gpu_check_script_builds_its_cubins_here(tmp_path):
    """scripts/aot_gpu_check.py build: the half of the GPU check that runs without a GPU."""
    import json
    import sys

    import forks

    script = __import__("pathlib").Path(__file__).parents[1] / "scripts" / "aot_gpu_check.py"
    result = forks.run([sys.executable, str(script), "build", str(tmp_path)], timeout=300, cwd="/")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    launches = [launch for entry in manifest for launch in entry["launches"]]
    assert len(launches) == 4
    for launch in launches:
        assert (tmp_path / launch["cubin"]).read_bytes()[:4] == b"\x7fELF" and launch["entry"].startswith("_Z")


def test_a_missing_toolchain_is_a_clear_error(monkeypatch):
    """Without NVVM (the aot extra not installed) compiling says what to install, not a bare ImportError."""
    import numba.cuda.cudadrv.nvvm as nvvm

    from simaccel import EngineError
    from simaccel.kernels.elementwise import _unary_kernel

    def absent():
        raise OSError("libnvvm.so: cannot open shared object file")

    monkeypatch.setattr(nvvm, "NVVM", absent)
    assert "pip install '.[aot]'" in toolchain_missing() and "libnvvm.so" in toolchain_missing()
    program = one_op_program("simaccel.relu", [(4,)], "float32")
    with pytest.raises(EngineError, match="toolchain is not installed .*libnvvm.so"):
        compile_kernel(_unary_kernel, signature(plan_launches(program)[0], program), SM90)


@pytest.mark.parametrize("library", ["NVVM", "NVRTC", "nvJitLink"])
def test_a_partial_toolchain_names_the_library_that_does_not_load(monkeypatch, library):
    """A toolkit can be partial (NVVM installed, NVRTC not): each library is loaded, and the one
    that fails is named, whichever it is."""
    import numba.cuda.cudadrv.nvvm as nvvm
    from cuda.bindings import nvjitlink, nvrtc

    def absent(*args):
        raise RuntimeError(f'Failure finding "lib{library.lower()}.so.13"')

    module, attribute = {"NVVM": (nvvm, "NVVM"), "NVRTC": (nvrtc, "nvrtcVersion"),
                         "nvJitLink": (nvjitlink, "version")}[library]
    monkeypatch.setattr(module, attribute, absent)
    reason = toolchain_missing()
    assert reason is not None and f"{library} does not load" in reason and "pip install '.[aot]'" in reason


def test_build_for_cuda_without_nvrtc_warns_and_keeps_python_regions(tmp_path):
    """`simaccel build --demo --target cuda` where NVRTC does not load (a partial toolkit, here
    simulated at interpreter start): the build says why its regions run through Python, and
    succeeds, as docs/setup.md promises; not an internal error."""
    (tmp_path / "sitecustomize.py").write_text(
        "from cuda.bindings import nvrtc\n"
        "def _absent(*args):\n"
        "    raise RuntimeError('Failure finding \"libnvrtc.so.13 or libnvrtc.so.12\"')\n"
        "nvrtc.nvrtcVersion = _absent\n")
    env = {"PYTHONPATH": str(tmp_path), "SIMACCEL_NATIVE": "auto"}
    result = forks.cli("build", "--demo", "--target", "cuda", "-o", tmp_path / "demo.so", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "run through Python" in result.stderr and "NVRTC does not load" in result.stderr
    assert (tmp_path / "demo.so").is_file()


# -- Any NVIDIA GPU: every op family for every architecture CUDA 13 compiles for ---------------
CONV3 = {"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1}
POOL = {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1, 1, 1], "dilation": [1, 1]}
# One program per op family with kernels, at shapes that pick each kernel variant: the
# matmul tilings and the tensor-core loop, conv's grouped kernel (first two: ungrouped with 4
# channels, depthwise 3x3 with stride 2), its direct kernel (a 9x9 kernel) and both implicit GEMMs, the
# row kernels' block and warp-per-row forms, the bandwidth kernels' ILP form.
FAMILY_CASES = [
    ("simaccel.conv2d_bias_relu", [(1, 3, 8, 8), (4, 3, 3, 3), (1, 4, 1, 1)], CONV3),
    ("simaccel.conv2d", [(2, 8, 14, 14), (8, 1, 3, 3)], {**CONV3, "strides": [2, 2], "groups": 8}),
    ("simaccel.conv2d", [(1, 2, 12, 12), (2, 1, 9, 9)], {**CONV3, "padding": [4, 4, 4, 4], "groups": 2}),
    ("simaccel.conv2d", [(2, 16, 14, 14), (32, 16, 3, 3)], CONV3),
    ("simaccel.conv2d", [(2, 3, 14, 14), (32, 3, 3, 3)], CONV3),
    ("simaccel.add", [(4, 1, 8), (3, 1)], {}), ("simaccel.subtract", [(5,), (5,)], {}),
    ("simaccel.multiply", [(1 << 20,), (1 << 20,)], {}), ("simaccel.divide", [(2, 5), (5,)], {}),
    ("simaccel.power", [(3, 4), (3, 4)], {}), ("simaccel.clip", [(7, 3)], {"min": 0.0, "max": 6.0}),
    ("simaccel.broadcast_to", [(1, 6)], {"shape": [4, 6]}),
    *[(f"simaccel.{name}", [(9, 4)], {}) for name in ("relu", "gelu", "gelu_tanh", "sigmoid", "tanh", "silu", "exp", "sqrt",
                                                             "rsqrt", "negative", "sin", "cos")],
    ("simaccel.gelu", [(1 << 21,)], {}),
    ("simaccel.permute_dims", [(4, 5, 6, 7)], {"axes": [0, 2, 1, 3]}),
    ("simaccel.strided_slice", [(6, 9)], {"begin": [1, 0], "end": [6, 9], "strides": [2, 3]}),
    ("simaccel.concat", [(2, 3), (2, 4)], {"axis": 1}),
    ("simaccel.matmul_bias_gelu", [(64, 32), (32, 48), (48,)], {}), ("simaccel.matmul_relu", [(4096, 64), (64, 4096)], {}),
    ("simaccel.dense", [(64, 32), (48, 32)], {}), ("simaccel.dense_gelu", [(4096, 64), (4096, 64)], {}),
    ("simaccel.dense_bias", [(40, 96), (48, 96), (48,)], {}),  # the sliced-K tiling
    ("simaccel.matmul_bias", [(1, 96), (96, 48), (48,)], {}),  # the GEMV
    ("simaccel.softmax", [(3, 33)], {}), ("simaccel.softmax", [(4096, 1024)], {}),
    ("simaccel.softmax", [(1024, 8192)], {}),  # the wide twin: blocks of 1024
    ("simaccel.layer_norm", [(2, 9), (9,), (9,)], {"epsilon": 1e-5}),
    ("simaccel.layer_norm", [(4096, 1024), (1024,), (1024,)], {"epsilon": 1e-5}),
    ("simaccel.rms_norm", [(2, 9), (9,)], {"epsilon": 1e-5}), ("simaccel.rms_norm", [(4096, 128), (128,)], {"epsilon": 1e-5}),
    ("simaccel.rms_norm", [(2, 9000), (9000,)], {"epsilon": 1e-5}),  # the long-row kernel
    ("simaccel.attention", [(1, 5, 2, 128), (1, 9, 2, 128), (1, 9, 2, 64)], {"scale": 0.1, "causal": True, "bottom_right": True}),
    ("simaccel.attention", [(1, 5, 4, 128), (1, 9, 2, 128), (1, 9, 2, 128)], {"scale": 0.1, "causal": True, "bottom_right": True}),
    ("simaccel.grouped_attention", [(1, 5, 4, 64), (1, 9, 2, 64), (1, 9, 2, 64)], {"scale": 0.1, "causal": False, "bottom_right": False}),
    ("simaccel.attention_bias", [(1, 5, 4, 64), (1, 9, 4, 64), (1, 9, 4, 64), (1, 1, 5, 9)],
     {"scale": 0.1, "causal": True, "bottom_right": True}),
    ("simaccel.attention_bias", [(1, 1, 8, 64), (1, 700, 2, 64), (1, 700, 2, 64), (1, 1, 1, 700)],
     {"scale": 0.1, "causal": False, "bottom_right": False}),  # split keys: the split kernel reads the bias
    ("simaccel.grouped_attention_bias", [(1, 5, 4, 64), (1, 9, 2, 64), (1, 9, 2, 64), (1, 4, 5, 9)],
     {"scale": 0.1, "causal": False, "bottom_right": False}),
    ("simaccel.conv2d_transpose", [(1, 4, 5, 6), (4, 3, 3, 3)],
     {"strides": [2, 2], "padding": [1, 1, 1, 1], "output_padding": [1, 1], "dilation": [1, 1], "groups": 1}),
    ("simaccel.max_pool2d", [(1, 2, 9, 9)], POOL), ("simaccel.avg_pool2d", [(1, 2, 9, 9)], {**POOL, "count_include_pad": True}),
    ("simaccel.sum", [(4, 5, 6)], {"axes": [1], "keepdims": False}),
    ("simaccel.mean", [(2, 3, 64, 64)], {"axes": [2, 3], "keepdims": True}),
    ("simaccel.max", [(4, 5, 6)], {"axes": [2], "keepdims": False}),
    ("simaccel.cumsum", [(4, 5, 6)], {"axis": 1, "exclusive": True}),
]


@pytest.mark.parametrize("dtype", ["int64", "int32", "int8", "bool"])
def test_the_integer_cumsum_kernel_compiles_without_spills(dtype):
    """cumsum's integer kernel (an int64 sum wrapped to the output's width, or for bool its
    != 0), which FAMILY_CASES' float dtypes do not reach."""
    [kernel] = compile_program(one_op_program("simaccel.cumsum", [(4, 9)], dtype, {"axis": 1, "exclusive": False}), SM90)
    assert kernel.kernel.__name__ == "_int_scan_kernel" and kernel.cubin[:4] == b"\x7fELF"
    assert no_spills(kernel)["stack"] == 0


def test_the_family_cases_cover_every_op_family_with_kernels():
    """Views (reshape, squeeze, ...) launch nothing; every other built-in family is in FAMILY_CASES
    or, for the mask families (integer and bool dtypes), in test_mask_ops.MASK_FAMILY_CASES."""
    from simaccel.ops import families, get_op

    from test_mask_ops import mask_families  # integer and bool dtypes: tests/test_mask_ops.py compiles those

    named = {get_op(name).family.name for name, _, _ in FAMILY_CASES} | mask_families()
    assert named == {f.name for f in families() if f.namespace == "simaccel" and not f.view}


def supported_archs():
    from simaccel.aot import supported_archs

    return supported_archs() if toolchain_missing() is None else [SM90]


@pytest.mark.parametrize("arch", supported_archs(), ids=lambda a: f"sm_{a[0]}{a[1]}")
def test_every_op_family_compiles_for_every_architecture(arch):
    """CUDA 13 compiles for sm_75 ... sm_121: every family's kernels compile for each, spill
    nothing, and carry PTX a driver of MIN_DRIVER can JIT; below sm_80 the float16 matmul takes
    its float32-FMA path (no mma, no cp.async). float16 (the tensor-core and 16-bit paths) on
    every architecture; float32 on the first of each code path the kernels choose between
    (sm_75: no tensor cores, sm_80: mma.sync, sm_90: the tuned launch bounds and wgmma), which
    the others share (half the suite's longest test)."""
    from simaccel.aot import MAX_PTX_VERSION

    for name, shapes, attrs in FAMILY_CASES:
        for dtype in ("float32", "float16") if tuple(arch) in ((7, 5), (8, 0), SM90) else ("float16",):
            for kernel in compile_program(one_op_program(name, shapes, dtype, attrs), arch):
                assert f".target sm_{arch[0]}{arch[1]}" in kernel.ptx and kernel.cubin[:4] == b"\x7fELF"
                assert kernel.ptx_version <= MAX_PTX_VERSION, (name, dtype, kernel.ptx_version)
                used = no_spills(kernel)
                # As on sm_90: no stack, but the tensor-core kernels' accumulators handed across
                # to the Numba epilogue (4 bytes each); registers are the compiler's off sm_90.
                tensor_core_kernel = "_tensor_core_kernel_" in kernel.kernel.__name__
                # sin and cos (their own kernel): libdevice's argument reduction of a large |x|
                # keeps a few words in a local array, a stack frame that no other kernel carries
                trig = kernel.kernel.__name__ == "_trig_kernel"
                allowed = 512 if tensor_core_kernel else 32 if trig else 0
                assert used["stack"] <= allowed, (name, dtype, kernel.kernel.__name__, used)
                assert used["registers"] <= 255
                tensor_core = "mma.sync" in kernel.ptx or "cp.async" in kernel.ptx
                assert not tensor_core or arch >= (8, 0), (name, dtype, arch)
                if tensor_core_kernel:
                    assert tensor_core == (arch >= (8, 0)), (name, dtype, arch)


def test_ptx_newer_than_the_minimum_driver_jits_is_refused_at_build(monkeypatch):
    """A toolchain of a later CUDA line (nvJitLink 13.5 wrote PTX 9.5, which driver 580 cannot
    JIT) is caught when the library is built, not when it first runs on a GPU."""
    import simaccel.aot as aot
    from simaccel import EngineError

    program = one_op_program("simaccel.relu", [(4,)], "float32")
    launch = plan_launches(program)[0]
    monkeypatch.setattr(aot, "MAX_PTX_VERSION", (8, 8))
    with pytest.raises(EngineError, match=r"kernel _unary_kernel: its PTX for sm_90 is version 9.0, newer than a driver "
                                          r"580 \(CUDA 13.0\) JITs \(8.8\); nvJitLink 13.0 .*pip install '.\[aot\]'"):
        compile_kernel(launch.kernel, signature(launch, program), SM90)


def test_the_toolchain_is_one_cuda_line():
    """NVVM, NVRTC and nvJitLink of CUDA 13.0 (setup.py pins them): their PTX is what the
    README's minimum driver JITs."""
    from cuda.bindings import nvjitlink, nvrtc

    assert tuple(nvjitlink.version()) == (13, 0)
    assert tuple(nvrtc.nvrtcVersion()[1:]) == (13, 0)


@pytest.mark.parametrize("text, archs", [("sm_90", [(9, 0)]), ("75,80;86 9.0", [(7, 5), (8, 0), (8, 6), (9, 0)]),
                                         ("sm_90a, 90, compute_90", [(9, 0)]), ("120 121", [(12, 0), (12, 1)])])
def test_architecture_lists_are_read_in_every_spelling(text, archs, monkeypatch):
    from simaccel.aot import parse_archs

    assert list(parse_archs(text)) == archs
    assert list(parse_archs([a for a in archs])) == archs
    monkeypatch.setenv("SIMACCEL_CUDA_ARCHS", text)
    assert list(parse_archs(None, default=(8, 0))) == archs
    monkeypatch.delenv("SIMACCEL_CUDA_ARCHS")
    assert parse_archs(None, default=(8, 0)) == ((8, 0),)


@pytest.mark.parametrize("name, shapes, attrs", [("simaccel.softmax", [(3, 33)], {}),
                                                 ("simaccel.matmul_relu", [(64, 32), (32, 48)], {})])  # one links C++
def test_numbas_front_end_runs_once_for_all_architectures_and_gives_numbas_own_code(name, shapes, attrs):
    """`aot._frontend`: numba-cuda's typing and lowering, four fifths of a compile, is run once per
    kernel, signature and launch bounds; NVVM then compiles that library per architecture. The
    PTX equals numba-cuda's own compile for each architecture, but for symbol names (numba
    mangles the target's flags and a counter into them)."""
    import re

    from numba import cuda

    from simaccel import aot
    from simaccel.kernels.target import launch_bounds, link_sources

    program = one_op_program(name, shapes, "float32", attrs)
    [launch] = plan_launches(program)
    kernel, sig = launch.kernel, signature(launch, program)
    names = lambda ptx: re.sub(r"_ZN\w+|\$\d+|_cudapy_smem_\d+", "S", ptx)  # noqa: E731
    before = len(aot._FRONTENDS)
    for arch in [(7, 5), (12, 0)]:  # same launch bounds off sm_90: one front end
        ours = aot.compile_kernel(kernel, sig, arch).ptx
        with aot.compile_for(arch):
            if link_sources(kernel):
                ltoir, _ = cuda.compile(kernel, sig, device=False, abi="numba", cc=arch, output="ltoir",
                                        launch_bounds=launch_bounds(kernel, arch))
                inputs = [(bytes(ltoir), "LTOIR")] + [(aot._nvrtc_ltoir(p, arch), "LTOIR") for p in link_sources(kernel)]
                numbas = aot._link(inputs, arch, kernel.__name__, ptx=True)[0].decode()
            else:
                numbas, _ = cuda.compile_ptx(kernel, sig, cc=arch, launch_bounds=launch_bounds(kernel, arch))
        assert f".target sm_{arch[0]}{arch[1]}" in ours and names(ours) == names(numbas), arch
    assert len(aot._FRONTENDS) <= before + 1


@pytest.mark.parametrize("shape, axes, kernel", [((4, 300, 9, 101), [0, 2, 1, 3], "_copy_rows_kernel"),
                                                 ((2, 40, 70), [0, 2, 1], "_transpose_kernel"),
                                                 ((2, 5, 7, 3), [0, 3, 1, 2], "_gather_kernel")])
def test_bfloat16_copies_compile_moving_float16(shape, axes, kernel):
    """The copy kernels hold values in local and shared arrays, which numba-cuda 0.30 makes of no
    bfloat16 ("unsupported type: __nv_bfloat16", on an H100): a bfloat16 tensor is read and
    written as float16 there (the launch's View says so), its 2 bytes moved unchanged."""
    program = one_op_program("simaccel.permute_dims", [shape], "bfloat16", {"axes": axes})
    [launch] = plan_launches(program)
    assert launch.kernel.__name__ == kernel and [a.dtype for a in launch.args[:2]] == ["float16", "float16"]
    [compiled] = compile_program(program, SM90)
    assert compiled.cubin[:4] == b"\x7fELF"
