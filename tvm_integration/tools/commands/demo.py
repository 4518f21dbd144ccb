"""`simaccel demo`: the demo model (or a torch.export model) partitioned, built, run and checked against TVM alone.

The work is tools/demo.py's (`run_demo`).
"""

from __future__ import annotations

from ..torch_models import MODEL_NAMES as TORCH_MODELS
from .options import add_profile, add_trace, check_seed

NAME = "demo"


def add_parser(subparsers) -> None:
    demo = subparsers.add_parser(
        NAME,
        help="build, partition, run and verify the demo model against TVM alone",
        description="Partition a small CNN+MLP model for simaccel, compile it, run it and check it "
        "against the same model built by TVM alone. Exits 1 on a mismatch.",
    )
    demo.add_argument(
        "--engine",
        choices=["auto", "ref", "sim", "cuda"],
        default="auto",
        help="simaccel engine: ref (numpy, fast), sim (Numba CUDA kernels on the simulator, slow), "
        "cuda (the kernels on the GPU); auto: ref for CPU tensors, cuda for GPU tensors "
        "(default: auto, or $SIMACCEL_ENGINE)",
    )
    demo.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="where the model runs: cpu (llvm target) or cuda (CUDA target); auto: cuda when TVM finds a GPU",
    )
    demo.add_argument("--staged", action="store_true", help="GPU only: copy region tensors through host memory (comparison mode)")
    demo.add_argument("--seed", type=int, default=0, help="seed for the random inputs and weights (default 0)")
    demo.add_argument("--dtype", choices=["float32", "float16"], default="float32", help="model dtype (default float32)")
    add_profile(demo)
    add_trace(demo)
    demo.add_argument(
        "--model",
        choices=["cnn", *TORCH_MODELS],
        default="cnn",
        help="cnn: the built-in CNN + MLP model (default); the others are PyTorch models exported with "
        "torch.export and imported into TVM (needs pip install 'simaccel[torch]'), checked against TVM alone "
        "and shown beside torch's own result",
    )
    demo.add_argument(
        "--size",
        choices=["full", "small"],
        default="full",
        help="torch models: full (the real architecture at its usual input, the default) or small (a small "
        "input or a narrow copy: seconds on the CPU engines)",
    )


def check(args) -> None:
    check_seed(args.seed)


def run(args) -> int:
    from ..demo import run_demo

    return run_demo(engine=args.engine, seed=args.seed, dtype=args.dtype, device=args.device, staged=args.staged,
                    model=args.model, size=args.size)
