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


def report_head(title: str, summary: dict, speed: str, counted: str) -> list[str]:
    """The first lines of a campaign's Markdown report: its title, where and how it ran (the
    summary's date and device and engines, then `speed`), and the table of how many `counted`
    (cases, models) got each verdict."""
    return [f"# {title}", "",
            f"{summary['date']}, {summary['device']}; engines {', '.join(summary['engines'])}; {speed}", "",
            f"| verdict | {counted} |", "|---|---|",
            *(f"| {verdict} | {n} |" for verdict, n in summary["counts"].items())]


def run_line(summary: dict) -> str:
    """How a campaign ran: 'EXECUTOR (N worker(s)), S s'."""
    return f"{summary['executor']} ({summary['workers']} worker(s)), {summary['seconds']:.0f} s"
