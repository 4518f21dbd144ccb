"""What a conformance run writes: the verdict of each model, the JSON, markdown and HTML tables,
and the comparison with an earlier run (`--compare OLD.json`).

Where it sits: conformance/run.py collects `check_model`'s results (conformance/check.py) and
hands them here; everything here is plain Python over plain data.
"""

from __future__ import annotations

import html

from ....errors import SimAccelError
from ....json_file import read_json
from ..bench_compare import SLOWER_BY, Change
from ..common.verdicts import FAIL, PASS, SKIP, TVM_OFF, report_head, run_line

VERDICTS = (PASS, TVM_OFF, SKIP, FAIL)


def model_verdict(result: dict) -> str:
    """One verdict for a model: failed if anything failed (loading, an engine, the reload, the
    check itself), else TVM numerically off if an engine says so, skipped if every engine was,
    else passed."""
    entries = list(result.get("engines", {}).values())
    if "failure" in result or "error" in result or not entries:
        return FAIL
    verdicts = [e["verdict"] for e in entries] + [e["reload"]["verdict"] for e in entries if "reload" in e]
    for verdict in (FAIL, TVM_OFF):
        if verdict in verdicts:
            return verdict
    return SKIP if all(v == SKIP for v in verdicts) else PASS


def failures(result: dict) -> list[str]:
    """Every failure of a model, one line each: where, and why."""
    lines = []
    if "failure" in result:  # the model as a whole: not loaded, or its worker lost
        lines.append(f"{result['failure']['stage']}: {result['failure']['reason']}")
    if "error" in result:
        lines.append(f"the check itself failed: {result['error']}")
    for engine, entry in result.get("engines", {}).items():
        for part in (entry, entry.get("reload") or {}):
            if part.get("verdict") == FAIL:
                lines.append(f"{part['stage']}: {part['reason']}")
    return lines


def _engine_cell(entry: dict | None) -> str:
    if entry is None:
        return "-"
    text = {PASS: "passed", FAIL: "FAILED", SKIP: "skipped", TVM_OFF: "TVM off"}[entry["verdict"]]
    if entry["verdict"] == FAIL:
        text += f" ({entry['stage']})"
    if "ratio" in entry:
        text += f", {entry['ratio']:.2f}x"
    if "reload" in entry:
        text += ", reloaded" if entry["reload"]["verdict"] == PASS else ", reload FAILED"
    if "vs_torch" in entry:
        text += ", = torch" if entry["vs_torch"] is None else ", differs from torch"
    if entry.get("shapes"):
        text += f", at {len(entry['shapes']) + 1} shapes"
    return text


def _kept(partition: dict) -> str:
    kept = partition.get("kept") or {}
    return ", ".join(f"{op.removeprefix('relax.')} x{e['count']}" for op, e in kept.items()) or "none"


def table_rows(summary: dict) -> tuple[list[str], list[list[str]]]:
    """The model table, as a header and rows of text cells."""
    engines = summary["engines"]
    header = ["model", "source", "verdict", "regions", "ops offloaded", "kept on TVM", *engines, "TVM alone vs torch",
              "s"]
    rows = []
    for result in summary["models"]:
        partition = result.get("partition") or {}
        torch = result.get("tvm_vs_torch", "-") if "tvm_vs_torch" in result else "-"
        rows.append([result["model"]["name"], result["model"]["source"], model_verdict(result),
                     str(partition.get("regions", "-")), str(partition.get("offloaded_total", "-")),
                     _kept(partition) if partition else "-",
                     *[_engine_cell(result.get("engines", {}).get(e)) for e in engines],
                     "matches" if torch is None else ("-" if torch == "-" else "differs"),
                     f"{result.get('seconds', 0):.0f}"])
    return header, rows


def markdown(summary: dict) -> str:
    header, rows = table_rows(summary)
    lines = report_head(f"simaccel conformance: {len(summary['models'])} models, backend {summary['backend']}",
                        summary, f"zoo {', '.join(summary['zoo'])} ({summary['size']} size); {run_line(summary)}, "
                        f"{summary['models_per_second']:.3f} models/s.", "models")
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    failed = [r for r in summary["models"] if model_verdict(r) == FAIL]
    lines += ["", f"## Failures: {len(failed)}", ""]
    lines += [f"- **{r['model']['name']}**: " + "; ".join(failures(r)) for r in failed] or ["None."]
    lines += ["", "## Partitions", ""]
    for r in summary["models"]:
        if r.get("partition_text"):
            lines += [f"### {r['model']['name']}", "", "```", r["partition_text"], "```", ""]
    return "\n".join(lines) + "\n"


_COLOURS = {PASS: "#dff0d8", TVM_OFF: "#fcf8e3", SKIP: "#eeeeee", FAIL: "#f2dede"}


def html_page(summary: dict) -> str:
    header, rows = table_rows(summary)
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = []
    for row in rows:
        colour = _COLOURS.get(row[2], "#ffffff")
        body.append(f'<tr style="background:{colour}">' + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>")
    details = []
    for r in summary["models"]:
        problems = failures(r)
        if problems or r.get("partition_text"):
            details.append(f"<h3>{esc(r['model']['name'])}</h3>"
                           + "".join(f"<p><b>failed</b>: {esc(p)}</p>" for p in problems)
                           + (f"<pre>{esc(r['partition_text'])}</pre>" if r.get("partition_text") else ""))
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>simaccel conformance</title>"
            "<style>body{font-family:sans-serif}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
            "padding:2px 6px;font-size:13px}pre{background:#f7f7f7;padding:6px}</style></head><body>"
            f"<h1>simaccel conformance: {len(summary['models'])} models, backend {esc(summary['backend'])}</h1>"
            f"<p>{esc(summary['date'])}, {esc(summary['device'])}; engines {esc(', '.join(summary['engines']))}; "
            f"{summary['seconds']:.0f} s on {esc(summary['executor'])} ({summary['workers']} worker(s))</p>"
            f"<table><tr>{head}</tr>{''.join(body)}</table><h2>Models</h2>{''.join(details)}</body></html>\n")


def load_results(path) -> dict:
    """An earlier run's conformance.json; SimAccelError naming the file."""
    summary = read_json(path, f"--compare {path}")
    if not isinstance(summary, dict) or not isinstance(summary.get("models"), list):
        raise SimAccelError(f'--compare {path}: no "models" list (is it a conformance.json?)')
    return summary


def run_regressions(new: dict, old: dict, tolerance: float = SLOWER_BY) -> tuple[list[str], list[str]]:
    """(regressions, notes) of `new` against `old`: a model or engine that passed and now fails,
    and a time against TVM alone more than `tolerance` worse (bench --compare's rule); notes
    for what got fixed and what only one run has."""
    regressions, notes = [], []
    old_models = {r["model"]["name"]: r for r in old["models"]}
    new_models = {r["model"]["name"]: r for r in new["models"]}
    for name in sorted(set(old_models) | set(new_models)):
        if name not in new_models or name not in old_models:
            notes.append(f"{name}: only in the {'new' if name in new_models else 'old'} run")
            continue
        before, after = model_verdict(old_models[name]), model_verdict(new_models[name])
        if before == PASS and after == FAIL:
            regressions.append(f"{name}: passed, now fails: " + "; ".join(failures(new_models[name])))
        elif before == FAIL and after == PASS:
            notes.append(f"{name}: failed, now passes")
        old_engines, new_engines = old_models[name].get("engines", {}), new_models[name].get("engines", {})
        for engine in sorted(set(old_engines) & set(new_engines)):
            a, b = old_engines[engine], new_engines[engine]
            if "ratio" in a and "ratio" in b:
                change = Change(name, engine, a["ratio"], b["ratio"], a["median_us"]["backend"],
                                b["median_us"]["backend"])
                if change.regressed(tolerance):
                    regressions.append(f"{name} {engine}: {change.old_ratio:.2f}x -> {change.new_ratio:.2f}x of TVM "
                                       f"alone ({change.change:+.0%})")
    return regressions, notes
