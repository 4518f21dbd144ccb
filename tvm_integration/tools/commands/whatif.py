"""`simaccel whatif`: one model under several device profiles, by the timing model (nothing runs).

The work is tools/whatif.py's (`whatif`, `format_whatif`, `write_roofline`).
"""

from __future__ import annotations

import os

from ....errors import SimAccelError
from . import OK
from .options import MODEL_HELP

NAME = "whatif"


def add_parser(subparsers) -> None:
    whatif = subparsers.add_parser(
        NAME,
        help="compare device profiles on a model by the timing model (modeled time per region, a roofline chart)",
        description="Partition MODEL.py's Relax IRModule (or the demo model) for each --profile, turn its regions "
        "into Programs and model each call's time on the accelerator the profile describes (its `performance` "
        "figures: peak operations per second per dtype, memory and scratchpad bandwidth, dispatch costs). "
        "Nothing runs. Each op left on TVM is listed with its reason (not modeled); a region called several times "
        "counts once per call.",
    )
    whatif.add_argument("model", nargs="?", metavar="MODEL.py", help=MODEL_HELP)
    whatif.add_argument("--demo", action="store_true", help="the demo model (the CNN of `simaccel demo`) instead")
    whatif.add_argument("--profile", action="append", default=[], metavar="FILE", dest="profiles",
                        help="a device profile with performance figures (repeat it to compare; see examples/profiles/)")
    whatif.add_argument("--png", metavar="FILE", help="also draw each profile's roofline with the model's ops on it")
    whatif.add_argument("--sizes", metavar="NAME=N,...",
                        help="the values of the model's size vars to model it at (symbolic shapes)")


def check(args) -> None:
    from ..build_library import parse_sizes

    if (args.model is None) == (not args.demo):
        raise SimAccelError("whatif: give either MODEL.py or --demo")
    args.sizes = parse_sizes(args.sizes)
    if not args.profiles:
        raise SimAccelError("whatif: name at least one --profile FILE (a device profile with performance figures)")
    if args.png and not os.path.isdir(os.path.dirname(os.path.abspath(args.png))):
        raise SimAccelError(f"--png {args.png}: no folder {os.path.dirname(os.path.abspath(args.png))}")


def run(args) -> int:
    from ....profile import DeviceProfile
    from .. import models
    from ..build_library import load_model
    from ..whatif import format_whatif, whatif, write_roofline

    profiles = [DeviceProfile.load(path) for path in args.profiles]
    for profile in profiles:
        profile.check_ops()
    mod = models.demo_cnn("float32") if args.demo else load_model(args.model, args.sizes)
    results = whatif(mod, profiles, args.sizes)
    print(format_whatif(results))
    if args.png:
        write_roofline(results, args.png)
        print(f"wrote {args.png}")
    return OK
