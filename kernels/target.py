"""Kernel targets: where a module-scope kernel function runs.

Every kernel in this package is a plain Python function at module scope, written against
the `numba.cuda` API. A `KernelTarget` turns it into a launchable kernel for one target and
caches the result:

* ``"sim"``  - `numba.cuda.simulator.jit`: runs on the CPU, each CUDA thread interpreted (kernels/simulator.py).
  Arrays are `FakeCUDAArray` wrappers around numpy views, so kernels write the caller's
  memory in place (no copies).
* ``"cuda"`` - `numba.cuda.jit`: runs on an NVIDIA GPU, on the stream given to the target.

Both can coexist in one process, so the engine is chosen per call.

While a launch plan is recorded (`recording`, simaccel.launch_plan), a launcher must launch
through the target it is given, which records; a launch on any `KernelTarget` meanwhile is a
launcher that made a target of its own (its own stream), and raises `StrayLaunch`.

With $SIMACCEL_LINEINFO=1 (set by `simaccel sanitize`) GPU kernels carry line information
(numba's `lineinfo=True`, here and in ahead-of-time compiles), so compute-sanitizer's reports
name the kernel's source lines; unset, kernels compile exactly as without it. Kernels that
link CUDA C++ (the matmul main loops) get none here: NVVM's line information fails numba's
LTO link with NVRTC's code.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading

_COMPILED: dict[tuple, object] = {}
_LOCK = threading.Lock()

TARGETS = ("sim", "cuda")


LINEINFO_ENV = "SIMACCEL_LINEINFO"


def lineinfo() -> bool:
    """Whether GPU kernels compiled now carry line information ($SIMACCEL_LINEINFO set, not 0)."""
    return os.environ.get(LINEINFO_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


# The architecture the kernels' launch bounds are tuned on (H100/H200).
TUNED_ARCH = (9, 0)


def launch_bounds(fn, arch: tuple[int, int] = TUNED_ARCH):
    """The launch bounds a kernel function is compiled with for `arch`; None where it asks none.

    `fn.launch_bounds` (max threads per block, min blocks per SM) caps its registers, as tuned
    on TUNED_ARCH. On every other architecture CUDA 13 compiles for, that cap made the 128x128
    float32 matmuls, softmax and layer norm spill (sm_75 ... sm_121, from each cubin's own
    link log), so there only the block size is passed and the compiler allots the registers.
    The "cuda" target and ahead-of-time compiles (simaccel.aot) both honour them.
    """
    bounds = getattr(fn, "launch_bounds", None)
    if bounds is None or tuple(arch) == TUNED_ARCH:
        return bounds
    return tuple(bounds[:1])


def jit_target(cc: tuple) -> tuple:
    """The target numba-cuda's JIT compiles for on a GPU of compute capability `cc`: the
    arch-specific one ("a": sm_90a, with wgmma) from sm_90 on."""
    return (cc[0], cc[1], "a") if tuple(cc) >= (9, 0) else (cc[0], cc[1])


def dynamic_shared(fn, target: tuple) -> int:
    """Dynamic shared memory kernel `fn` needs when compiled for `target` ((major, minor) or
    with "a"), besides the shared bytes its launcher gives: `fn.dynamic_shared(target)`, the
    stage buffers of a CUDA C++ main loop whose size depends on the code the target gets
    (kernels/tensor_core.py); 0 for a kernel that declares none. Both launch paths add it:
    `KernelTarget.launch` for the device's JIT target, native regions per cubin (simaccel.aot)."""
    need = getattr(fn, "dynamic_shared", None)
    return int(need(tuple(target))) if need is not None else 0


# A block may use more shared memory than this only where its kernel was allowed to
# (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES), once per compiled kernel and device.
STATIC_SHARED_LIMIT = 48 * 1024
_ALLOWED: set = set()


def _allow_shared(dispatcher, args, total: int) -> None:
    """Let the kernel `dispatcher` compiles for `args` use `total` bytes of shared memory."""
    from numba.cuda.cudadrv.driver import binding, driver

    from numba import cuda

    compiled = dispatcher._compile_for_args(*args)  # numba's cache: compiles the first time only
    device = cuda.get_current_device()
    key = (compiled, device.id, total)
    if key in _ALLOWED:
        return
    cufunc = compiled._codelibrary.get_cufunc()
    attribute = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    driver.cuKernelSetAttribute(attribute, total, cufunc.handle, device.id)
    _ALLOWED.add(key)


def link_sources(fn) -> tuple:
    """CUDA C++ files a kernel function's device calls need (`fn.link`), linked into it with
    link-time optimisation by the "cuda" target and ahead-of-time compiles alike."""
    return tuple(getattr(fn, "link", ()))


def cpp_link(paths) -> list:
    """CUDA C++ files as numba-cuda links them at run time (`link=` of cuda.jit and
    cuda.declare_device): each file's text as one CUSource per file, named by its full path.
    numba-cuda names a file it reads itself by its base name, and NVRTC looks for the headers a
    file includes (kernels/sliced_k.cuh) beside its name; simaccel.aot compiles by path too."""
    return [_cpp_source(str(path)) for path in paths]


@functools.lru_cache(maxsize=None)
def _cpp_source(path: str):
    """One object per file: numba-cuda links each distinct object once (a kernel's own `link`
    and its declared device functions' name the same file)."""
    from numba import cuda

    with open(path) as f:
        return cuda.CUSource(f.read(), name=path)


# Byte alignment of shared arrays that inner loops read with 16-byte vector loads (NVVM
# vectorises only what it can prove aligned). The simulator rejects the argument.
SHARED_ALIGNMENT = 16


def shared_alignment(simulator: bool):
    """The `alignment` argument of a vector-read shared array: SHARED_ALIGNMENT, None on the simulator."""
    return None if simulator else SHARED_ALIGNMENT


def with_simulator_twin(factory, *args, **kwargs):
    """`factory(*args, simulator=False, **kwargs)`, a kernel function for the GPU, with
    `factory(*args, simulator=True, **kwargs)` as the function the simulator runs in its place
    (where the GPU code uses what the simulator lacks: CUDA C++, aligned shared arrays)."""
    kernel = factory(*args, simulator=False, **kwargs)
    kernel.simulated_by = factory(*args, simulator=True, **kwargs)
    kernel.simulated_by.__name__ = kernel.__name__
    return kernel


def simulated(fn):
    """The function the simulator runs for kernel `fn`: `fn.simulated_by` where its GPU code
    calls CUDA C++ (which the simulator cannot run), else `fn` itself."""
    return getattr(fn, "simulated_by", fn)


def compile_kernel(fn, target: str):
    """Return `fn` wrapped as a kernel for `target` ("sim" or "cuda"), cached per (fn, target)
    (and, on "cuda", whether it carries line information)."""
    key = (fn, target, lineinfo()) if target == "cuda" else (fn, target)
    kernel = _COMPILED.get(key)
    if kernel is None:
        with _LOCK:
            kernel = _COMPILED.get(key)
            if kernel is None:
                if target == "sim":
                    from numba.cuda import simulator

                    try:
                        from . import simulator as blocks
                    except ImportError as e:  # an install without its dependencies (pip --no-deps)
                        raise ImportError(f"the simulator's blocks need greenlet: pip install '{GREENLET}' ({e})") from None
                    blocks.install()  # a block's CUDA threads as greenlets
                    kernel = simulator.jit(simulated(fn))
                elif target == "cuda":
                    from numba import cuda
                    from numba.cuda.core import config

                    # Small regions launch small grids on purpose; numba's low-occupancy
                    # warning would fire (and cost time) on every such launch.
                    config.CUDA_LOW_OCCUPANCY_WARNINGS = 0
                    arch = tuple(cuda.get_current_device().compute_capability)
                    # Not where it links CUDA C++: NVVM's line information fails the LTO link
                    # with NVRTC's code (simaccel.aot compiles the C++ side with it instead).
                    extra = {"lineinfo": True} if key[2] and not link_sources(fn) else {}
                    kernel = cuda.jit(fn, launch_bounds=launch_bounds(fn, arch), link=cpp_link(link_sources(fn)), **extra)
                else:
                    raise ValueError(f"unknown kernel target {target!r} (expected one of {TARGETS})")
                _COMPILED[key] = kernel
    return kernel


GREENLET = "greenlet>=3.1,<4"  # what kernels/simulator.py runs a block's threads on (setup.py)


class StrayLaunch(RuntimeError):
    """A kernel launched on a `KernelTarget` while an op's launches were being recorded.

    `where` is what was being recorded, `target` the target launched on, `kernel` the kernel
    function: the launch would run outside the recorded plan, on `target.stream` instead of
    the stream of the calls that replay it.
    """

    def __init__(self, where: str, target: "KernelTarget", kernel, args=()):
        self.where, self.target, self.kernel, self.launch_args = where, target, kernel, tuple(args)
        super().__init__(f"{where}: kernel {getattr(kernel, '__name__', kernel)} launched on a KernelTarget "
                         f"({target.name!r}, stream {target.stream!r}) while its launches were being recorded")


class _Recording(threading.local):
    where = None  # what this thread records now (simaccel.launch_plan), else None


_RECORDING = _Recording()


@contextlib.contextmanager
def recording(where: str):
    """Mark this thread as recording `where`'s launches: a `KernelTarget.launch` meanwhile raises StrayLaunch."""
    previous, _RECORDING.where = _RECORDING.where, where
    try:
        yield
    finally:
        _RECORDING.where = previous


class KernelTarget:
    """What a launch function needs to know about where it runs.

    Parameters
    ----------
    name:
        "sim" or "cuda".
    stream:
        The stream kernels are launched on ("cuda": a numba stream; "sim": 0).
    """

    def __init__(self, name: str, stream=0):
        if name not in TARGETS:
            raise ValueError(f"unknown kernel target {name!r} (expected one of {TARGETS})")
        self.name = name
        self.stream = stream
        self._workspace = None  # bytes (`workspace`), allocated on the first request

    def launch(self, fn, grid, block, *args, shared_bytes: int = 0):
        """Launch module-scope kernel `fn` with the given grid and block on this target's stream."""
        if _RECORDING.where is not None:
            raise StrayLaunch(_RECORDING.where, self, fn, args)
        kernel = compile_kernel(fn, self.name)
        if self.name == "cuda" and getattr(fn, "dynamic_shared", None) is not None:
            from numba import cuda

            shared_bytes += dynamic_shared(fn, jit_target(cuda.get_current_device().compute_capability))
            if shared_bytes > STATIC_SHARED_LIMIT:
                _allow_shared(kernel, args, shared_bytes)
        kernel[grid, block, self.stream, shared_bytes](*args)

    def workspace(self, shape, dtype):
        """Scratch memory for a launcher called on this target directly (a test of its kernels, a
        benchmark), as a region's workspace is: one buffer of the target's, grown to the largest
        request, each request a view of its first bytes (so two requests share memory, and
        launches on the target's one stream may reuse it). Calls of a region do not come here:
        their launches are recorded (simaccel.launch_plan) and replayed on the region's own."""
        import numpy as np

        shape, dtype = tuple(int(d) for d in shape), np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if self._workspace is None or self._workspace.size < nbytes:
            if self.name == "sim":
                from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

                self._workspace = FakeCUDAArray(np.zeros(nbytes, np.uint8))
            else:
                from numba import cuda

                self._workspace = cuda.device_array(nbytes, dtype=np.uint8, stream=self.stream)
        return self.reshape(self._workspace[:nbytes], shape, dtype)

    def reshape(self, array, shape, dtype=None):
        """A view of contiguous device `array` with a new shape (never a copy), its bytes read
        as `dtype` where given (`reinterpret`)."""
        shape = tuple(int(d) for d in shape)
        if tuple(array.shape) == shape and (dtype is None or array.dtype == dtype):
            return array
        return reinterpret(array, shape, array.dtype if dtype is None else dtype)


def reinterpret(array, shape, dtype):
    """The bytes of C-contiguous `array` (numpy, the simulator's or a Numba device array) as a
    C-contiguous array of `shape` and `dtype`, no copy; its size in bytes must not grow.

    Device arrays are built here, not through numba-cuda's `DeviceNDArray.view`: in numba-cuda
    0.30 that gives a 0-d array's strides to a cached constructor as an empty list, which raises
    "unhashable type: 'list'" (a scalar constant on the cuda engine, seen on an H100)."""
    import numpy as np

    shape, dtype = tuple(int(d) for d in shape), np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes > array.size * array.dtype.itemsize:
        raise ValueError(f"{nbytes} bytes of {dtype} {shape} do not fit in {array.dtype} {tuple(array.shape)}")
    if isinstance(array, np.ndarray):
        return array.reshape(-1).view(np.uint8)[:nbytes].view(dtype).reshape(shape)
    if not hasattr(array, "gpu_data"):  # the simulator's FakeCUDAArray, around a numpy array
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return FakeCUDAArray(reinterpret(array._ary, shape, dtype))
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    strides = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) * dtype.itemsize for i in range(len(shape)))
    return DeviceNDArray(shape=shape, strides=strides, dtype=dtype, stream=array.stream, gpu_data=array.gpu_data)
