"""The `simaccel` commands, one module each, as TVM's tvmc lays out its own.

Every module here holds one command: `NAME`, `add_parser(subparsers)` (its options, help and
description, which docs/cli.md is written from), `check(args)` (refuse option values that
cannot work, a SimAccelError before any work is done) and `run(args) -> int` (do it, given the
parsed Namespace; the exit status). tools/cli.py lists the modules and holds what every
command shares: `main`, the exit-status handling, and --profile and --trace. The work itself
is done in the tools' own modules (demo.py, bench.py, fuzz/, conformance/, ...), which a
command imports when it runs, so that `simaccel --help` and a fork of the CLI stay cheap.

The exit statuses every command returns or `main` gives:
"""

OK, MISMATCH, USER_ERROR, INTERNAL_ERROR, INTERRUPTED = 0, 1, 2, 3, 130
