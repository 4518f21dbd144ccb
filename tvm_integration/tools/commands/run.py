"""`simaccel run`: an exported library run on inputs from an .npz, its outputs saved or checked.

Works with a runtime-only TVM: the library is loaded and run by tools/deploy.py, the arrays
read and written by tools/common/arrays.py.
"""

from __future__ import annotations

from . import MISMATCH, OK
from .options import add_trace, check_non_negative

NAME = "run"


def add_parser(subparsers) -> None:
    run = subparsers.add_parser(
        NAME,
        help="run an exported library on inputs from an .npz, optionally checking the outputs",
        description="Load LIB (made by export_library; works with a runtime-only TVM), run its main "
        "function and, with --expect, compare. Exits 1 on a mismatch.",
    )
    run.add_argument("library", metavar="LIB.so", help="the exported library")
    run.add_argument("--inputs", required=True, metavar="IN.npz",
                     help=".npz with the arguments, named arg0, arg1, ... (or arr_0, ...)")
    run.add_argument("--expect", metavar="OUT.npz", help=".npz with the expected outputs in order (named like --inputs)")
    run.add_argument("--save", metavar="OUT.npz", help="write the outputs to this .npz")
    run.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    run.add_argument("--rtol", type=float, help="relative tolerance of --expect (default: per dtype, float32 1e-4, "
                     "float16 2e-2, bfloat16 5e-2)")
    run.add_argument("--atol", type=float, help="absolute tolerance of --expect, times 1 + max |expected output| "
                     "(default: per dtype, float32 1e-5, float16 2e-2, bfloat16 5e-2)")
    add_trace(run)
    run.add_argument("--sanitize", action="store_true",
                     help="check every region call for unwritten outputs, out-of-bounds writes, writes into inputs, "
                          "GPU faults and stream misuse (slow; docs/debugging.md)")


def check(args) -> None:
    check_non_negative(("--rtol", args.rtol), ("--atol", args.atol))


def run(args) -> int:
    """Every argument is checked before the library runs."""
    from ..common.arrays import check_writable, read_arrays, write_arrays
    from ..deploy import parse_device, run_library

    parse_device(args.device)
    inputs = read_arrays(args.inputs, "--inputs")
    expected = read_arrays(args.expect, "--expect") if args.expect else None
    if args.save:
        check_writable(args.save, "--save")
    outputs = run_library(args.library, inputs, device=args.device, sanitize=args.sanitize)
    for i, out in enumerate(outputs):
        print(f"output {i}: {out.shape} {out.dtype}")
    if args.save:
        write_arrays(args.save, outputs, "--save")
    return OK if expected is None else compare_with_expected(outputs, expected, args.rtol, args.atol)


def compare_with_expected(outputs, expected, rtol: float | None = None, atol: float | None = None, out=print) -> int:
    """Print how each output compares with `expected` (simaccel.compare's rule for whole outputs:
    each dtype's tolerance unless given); OK when all match, else MISMATCH."""
    from ....compare import array_difference

    if len(expected) != len(outputs):
        out(f"RESULT: MISMATCH ({len(outputs)} outputs, {len(expected)} expected)")
        return MISMATCH
    ok = True
    for i, (got, want) in enumerate(zip(outputs, expected)):
        found = array_difference(got, want, rtol, atol, scaled=True)
        out(f"output {i}: max abs error {found.max_error:.3g} (rtol {found.rtol:g}, atol {found.atol:g} x "
            f"(1 + max |expected|))" + ("" if found.ok else f": {found.reason}"))
        ok = ok and found.ok
    out("RESULT: match" if ok else "RESULT: MISMATCH")
    return OK if ok else MISMATCH
