"""The verdicts of a fuzz case or a conformance model, and the stages a failure is found at.

Where it sits: shared by `simaccel fuzz` (fuzz/check.py, fuzz/campaign.py) and `simaccel
conformance` (conformance/), which judge a model the same way: it passes, is skipped (TVM
alone cannot build or run it), is TVM's fault ("TVM numerically off": TVM alone is the one
that is wrong) or fails, at a stage.
"""

PASS, SKIP, TVM_OFF, FAIL = "passed", "skipped (TVM alone cannot build or run it)", "TVM numerically off", "failed"
# Where a failure happened: the backend's build, an engine's run, an engine's output, the
# exported library in a fresh process; and, found by the campaign, a task that killed its
# process or ran past its time limit.
BUILD, RUN, OUTPUT, RELOAD, CRASH, HANG = "build", "run", "output", "reload", "crash", "hang"
