"""One model, two accelerators: the same Relax module partitioned for two device profiles.

    conv2d+bias+relu -> conv2d+bias+relu -> max_pool2d -> reshape -> dense+bias -> softmax

Profile "full" runs every declared op with no memory limit: the whole model is one region
(the reshape inside it is a view: no kernel, no copy). Profile "conv-only" runs only the
conv2d family, in float32, with a 20,000-byte scratchpad: the two convolutions (24,000
bytes of tensors together) are split into two regions, and pooling, reshape, dense and
softmax stay on TVM, each with the reason the report gives.

Each partition is built and run on the `ref` engine and checked against TVM alone.
Exit status 0 when both match, 1 otherwise.

    python examples/two_profiles.py [--engine ref|sim] [--seed N]
"""

from __future__ import annotations

import argparse
import sys
import textwrap

import tvm
from tvm import relax

import simaccel
from simaccel import DeviceProfile
from simaccel.compare import array_difference
from simaccel.tvm_integration import build, build_tvm_only, partition_report
from simaccel.tvm_integration.tools.models import random_inputs


PROFILES = [
    DeviceProfile(name="full"),
    DeviceProfile(name="conv-only", ops={"simaccel.conv2d"}, dtypes=("float32",), max_region_bytes=20_000),
]


def model(dtype: str = "float32") -> tvm.IRModule:
    def var(name, shape):
        return relax.Var(name, relax.TensorType(shape, dtype))

    x = var("image", (1, 4, 16, 16))
    w1, b1 = var("conv1_w", (8, 4, 3, 3)), var("conv1_b", (1, 8, 1, 1))
    w2, b2 = var("conv2_w", (8, 8, 3, 3)), var("conv2_b", (1, 8, 1, 1))
    fc_w, fc_b = var("fc_w", (10, 512)), var("fc_b", (10,))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w1, b1, w2, b2, fc_w, fc_b]):
        with bb.dataflow():
            h = bb.emit(relax.op.nn.conv2d(x, w1, padding=1))
            h = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(h, b1))))
            h = bb.emit(relax.op.nn.conv2d(h, w2, padding=1))
            h = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(h, b2))))
            h = bb.emit(relax.op.nn.max_pool2d(h, pool_size=(2, 2), strides=(2, 2)))
            h = bb.emit(relax.op.reshape(h, (1, 512)))
            h = bb.emit(relax.op.matmul(h, bb.emit(relax.op.permute_dims(fc_w))))
            out = bb.emit_output(relax.op.nn.softmax(bb.emit(relax.op.add(h, fc_b)), axis=-1))
        bb.emit_func_output(out)
    return bb.get()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=["ref", "sim"], default="ref")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    mod = model()
    tensors = [tvm.runtime.tensor(a, tvm.cpu()) for a in random_inputs(mod, args.seed)]
    want = relax.VirtualMachine(build_tvm_only(mod), tvm.cpu())["main"](*tensors).numpy()
    runtime = simaccel.get_runtime()

    layouts, ok = [], True
    for profile in PROFILES:
        print(f"== profile {profile.name}: {profile.to_dict()}")
        _, report = partition_report(mod, profile)
        print(textwrap.indent(report.format(), "    "))
        layouts.append([ops for ops in report.regions.values()])

        runtime.ledger.reset()
        with runtime.use_engine(args.engine):
            got = relax.VirtualMachine(build(mod, profile=profile), tvm.cpu())["main"](*tensors).numpy()
        ledger = runtime.ledger.snapshot()
        found = array_difference(got, want, scaled=True)  # simaccel.compare's rule, as every simaccel tool
        match = found.ok and ledger["offloaded_calls"] == len(report.regions)
        ok &= match
        print(f"    ran on {args.engine!r}: {ledger['offloaded_calls']} region call(s), ops {sorted(ledger['ops'])}")
        print(f"    max abs error vs TVM alone = {found.max_error:.3g}: {'match' if match else 'MISMATCH'}"
              + ("" if found.ok else f" ({found.reason})"))

    different = layouts[0] != layouts[1]
    print(f"the two partitions differ: {different}")
    print("RESULT: match" if ok and different else "RESULT: MISMATCH")
    return 0 if ok and different else 1


if __name__ == "__main__":
    sys.exit(main())
