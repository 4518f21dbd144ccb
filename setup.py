"""simaccel: a simulated on-GPU accelerator for testing TVM BYOC flows.

The folders `kernels/` and `tvm_integration/` are installed as `simaccel.kernels` and
`simaccel.tvm_integration`: a top-level `kernels` package would clash with an unrelated
PyPI project of that name.
"""

from pathlib import Path

from setuptools import setup

# Where each installed top-level package's files live in this checkout.
PACKAGE_DIRS = {"simaccel": "simaccel", "simaccel.kernels": "kernels", "simaccel.tvm_integration": "tvm_integration"}


def packages():
    """Every folder with an __init__.py under PACKAGE_DIRS, as a dotted package name."""
    found = []
    for name, folder in PACKAGE_DIRS.items():
        root = Path(__file__).parent / folder
        for init in sorted(root.rglob("__init__.py")):
            parts = init.parent.relative_to(root).parts
            found.append(".".join((name, *parts)))
    return found


# The whole toolchain that writes embedded GPU code from one CUDA line, 13.0: NVVM and NVRTC
# (the versions torch 2.14 pins, so `.[test,torch]` resolves) and nvJitLink, which
# cuda-toolkit 13.0 leaves at ">=13.0.88" (pip picked 13.5, whose LTO output is PTX 9.5). PTX
# 9.0 JITs on every driver from 580 (CUDA 13.0) on: the minimum the README states.
AOT = ["numba-cuda[cu13]==0.30.*", "cuda-toolkit==13.0.*", "nvidia-nvjitlink==13.0.*"]
DASK = ["dask[distributed]>=2026.8,<2027"]
# Charts: `simaccel trace --png`, the bench's figures, and the site's charts and sphinx-gallery
# (which imports it to collect a tutorial's figures, even where none draws one).
MATPLOTLIB = "matplotlib>=3.8"
# The documentation site (docs/conf.py), checked together on 2026-12-03. Its build runs the
# tutorials, which need no AOT toolchain: where NVRTC and the rest are missing, tutorial 3 shows
# the GPU run's recorded output (checked in a fresh venv with exactly this extra, 2026-12-06).
DOCS = ["sphinx==9.0.*", "sphinx-gallery==0.22.*", "myst-parser==5.2.*", "furo==2025.12.19", MATPLOTLIB]

setup(
    name="simaccel",
    version="0.1.0",
    description="A simulated on-GPU accelerator (Numba CUDA kernels) integrated into Apache TVM Relax through BYOC",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=packages(),
    # The C++ half of native regions, compiled into every CUDA build's library, and the
    # CUDA C++ main loops the matmul kernels link in.
    package_data={"simaccel.native": ["*.h"], "simaccel.kernels": ["*.cu", "*.cuh"]},
    package_dir=PACKAGE_DIRS,
    install_requires=[
        # Checked together on 2026-11-30 (docs/design.md, "Facts checked").
        "apache-tvm==0.27.*",
        "apache-tvm-ffi>=0.1.15,<0.2",
        "numba-cuda==0.30.*",
        # numpy's bfloat16 (the ISA's bfloat16 tensors, their references); TVM and numba-cuda
        # read bfloat16 arrays as its type too. Checked with 0.7.0 on 2026-12-06.
        "ml_dtypes>=0.5,<0.8",
        # numba-cuda 0.30.4 fails to import with numpy 2.5 (np.row_stack was removed).
        "numpy>=2,<2.5",
        # The simulator's CUDA threads of a block as greenlets (kernels/simulator.py); checked
        # with 3.5 on 2026-12-03.
        "greenlet>=3.1,<4",
    ],
    extras_require={
        # The test extra brings the AOT toolchain too, so CI compiles every kernel (simaccel.aot).
        # matplotlib: tests/test_trace.py draws a trace's PNG (`simaccel trace --png`).
        # pytest-xdist: the README's test command runs the suite on every core (`-n auto`).
        # setuptools: tests/test_packaging.py lists what an install holds (setup.py build_py).
        # dask: tests/test_fuzz_cluster.py starts a real scheduler and worker processes.
        # DOCS: tests/test_site.py builds the documentation site with warnings as errors.
        "test": ["pytest>=8", "pytest-xdist>=3.8", "setuptools>=65", MATPLOTLIB, *DASK, *AOT, *DOCS],
        # The documentation site: python -m sphinx docs docs/_build/html (.ci/run builds it so).
        "docs": DOCS,
        # `simaccel fuzz --jobs N / --cluster`: campaigns on Dask distributed (checked with 2026.8).
        "dask": DASK,
        # NVVM, NVRTC and nvJitLink from pip: kernels compiled for a GPU on a machine without one.
        "aot": AOT,
        # `simaccel bench`'s charts.
        "bench": [MATPLOTLIB],
        # `simaccel trace --png` (the timeline as a picture; the JSON and --summary need nothing).
        "trace": [MATPLOTLIB],
        # torch.export models (`simaccel demo --model`, tests/test_torch_models.py); checked with
        # TVM 0.27's from_exported_program on 2026-11-30. transformers: its LLaMA from a small
        # config (tests/test_transformers_models.py; checked with 5.25 here, 5.17 on the GPU machine).
        "torch": ["torch==2.14.*", "torchvision==0.29.*", "transformers>=5.17,<6"],
    },
    entry_points={
        "console_scripts": ["simaccel = simaccel.tvm_integration.tools.cli:main"],
        # A plain `import tvm` calls this hook: it registers simaccel's codegen and runtime.
        "tvm.backends": ["simaccel = simaccel.tvm_integration.backend.autoload:_autoload"],
        # pytest loads this plugin in every run: the simaccel_engine fixture and --simaccel-engines
        # (simaccel.testing; `-p no:simaccel` turns it off).
        "pytest11": ["simaccel = simaccel.tvm_integration.tools.pytest_plugin"],
    },
)
