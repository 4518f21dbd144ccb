"""The timing model against the GPU itself: `simaccel bench --ops` cases, modeled and measured.

    python -m simaccel.tvm_integration.tools.timing_validation OPS.json PROFILE.json

Where it sits: a tool over simaccel.timing and a committed `bench --ops` report (ops.json, a
real GPU run). Each case of the report is one op on its shapes; the model gives its time on
the accelerator of PROFILE (with the GPU's own figures: examples/profiles/h200.json) as a
one-op region's op (its dispatch and roofline, not the region's dispatch: bench times
kernels queued back to back); the report gives simaccel's kernel time and torch's peer in
the same run. Prints the markdown table docs/timing-model.md shows (a test checks they agree).
"""

from __future__ import annotations

import json
import sys

from ...profile import DeviceProfile
from ...program import OpNode, Program, TensorSpec
from ...timing import model_program
from .bench_ops import CASES


def one_op_program(op_name: str, shapes, dtype: str, attrs: dict) -> Program:
    from ...ops import get_op

    op = get_op(op_name)
    out, out_dtype = op.infer([tuple(s) for s in shapes], [dtype] * len(shapes), **op.all_attrs(attrs))
    n = len(shapes)
    tensors = tuple(TensorSpec(f"t{i}", tuple(s), dtype) for i, s in enumerate(shapes))
    tensors += (TensorSpec(f"t{n}", tuple(out), out_dtype),)
    return Program(op_name.split(".", 1)[1], tensors, tuple(range(n)), (n,), (OpNode(op_name, tuple(range(n)), n, attrs),)).validate()


def rows(report: dict, profile: DeviceProfile) -> list[dict]:
    """One row per case of `report` (a bench --ops ops.json) that bench_ops still defines."""
    cases = {case.label: case for case in CASES}
    out = []
    for label, measured in report["ops"].items():
        case = cases.get(label)
        if case is None:
            continue
        [op] = model_program(one_op_program(case.op, case.shapes, case.dtype, case.attrs), profile.performance).ops
        modeled_us = op.seconds * 1e6
        torch_us = measured.get("torch_us")
        out.append({"case": label, "bound": op.bound, "modeled_us": modeled_us, "measured_us": measured["median_us"],
                    "ratio": measured["median_us"] / modeled_us, "torch_us": torch_us,
                    "torch_ratio": torch_us / modeled_us if torch_us else None})
    return out


def table(rows_: list[dict]) -> str:
    lines = ["| case | bound by | modeled | simaccel | simaccel / modeled | torch | torch / modeled |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows_:
        torch = f"{r['torch_us']:.1f} us | {r['torch_ratio']:.2f}x" if r["torch_us"] else "- | -"
        lines.append(f"| {r['case']} | {r['bound']} | {r['modeled_us']:.1f} us | {r['measured_us']:.1f} us | "
                     f"{r['ratio']:.2f}x | {torch} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        report = json.load(f)
    print(table(rows(report, DeviceProfile.load(argv[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
