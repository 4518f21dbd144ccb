"""The figures of the site and the README, generated from the current result files.

Where it sits: `results/current.json` names the current file of each kind of result (the newest
committed run of that kind under results/gpu/, with its date and device). This module writes,
from those files and nothing typed by hand, the generated blocks of README.md, docs/gpu.md and
docs/timing-model.md: the text between `<!-- results:NAME -->` and `<!-- /results:NAME -->`.

    python docs/site_results.py           # rewrite the generated blocks from the current files
    python docs/site_results.py --check   # exit 1, naming them, where a committed block differs

tests/test_results_pages.py fails where a committed block is not what this writes. As a Sphinx
extension (docs/conf.py) it draws the charts (kernels, models, the timing model's validation)
from the same files into docs/generated_charts/ when the build starts, and puts each one after
its block on the site's pages (GitHub shows the tables alone).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import sys
import tarfile
import xml.etree.ElementTree as ElementTree

from simaccel.errors import SimAccelError

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("SIMACCEL_REPO") or os.path.dirname(HERE)  # as docs/conf.py
MANIFEST = "results/current.json"
GPU_RESULTS = "results/gpu"
H200_PROFILE = "examples/profiles/h200.json"
# The device profile with each GPU's own figures, for the timing model's validation against that
# GPU's kernel run (docs/timing-model.md).
GPU_PROFILES = {"NVIDIA H200": H200_PROFILE, "NVIDIA H100 80GB HBM3": "examples/profiles/h100.json"}


def kernels_profile() -> str:
    """The profile of the device the current kernel run was made on."""
    device = entry("kernels")["device"]
    if device not in GPU_PROFILES:
        raise ResultsError(f"no device profile for {device} (the current kernel run's): add one to GPU_PROFILES")
    return GPU_PROFILES[device]
BLOCK = re.compile(r"(<!-- results:([\w-]+) -->)(.*?)(<!-- /results:\2 -->)", re.S)


class ResultsError(SimAccelError):
    """A result file, the manifest or a page's generated block is missing or malformed."""


# -- the manifest and its files --------------------------------------------------------------------------------
def manifest() -> dict[str, dict]:
    """results/current.json's entries, by kind: file (and member of an archive), date, device, what."""
    with open(os.path.join(ROOT, MANIFEST), encoding="utf-8") as f:
        return json.load(f)["results"]


def entry(kind: str) -> dict:
    entries = manifest()
    if kind not in entries:
        raise ResultsError(f"{MANIFEST} names no current result of kind {kind!r} (it has {', '.join(entries)})")
    return entries[kind]


def read(relative: str, member: str | None = None):
    """A result file's content: JSON as a dict (from `member` of a .tgz archive), a JUnit XML
    file as its test counts, anything else as text."""
    path = os.path.join(ROOT, relative)
    if not os.path.isfile(path):
        raise ResultsError(f"result file {relative} does not exist")
    if relative.endswith(".tgz"):
        with tarfile.open(path) as archive:
            names = [member] if member else [n for n in archive.getnames() if n.endswith(".json")]
            if not names or names[0] not in archive.getnames():
                raise ResultsError(f"{relative} holds no {member or 'JSON file'}")
            return json.load(archive.extractfile(names[0]))
    if relative.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    if relative.endswith(".xml"):
        suites = list(ElementTree.parse(path).getroot().iter("testsuite"))
        counts = {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")}
        return {**counts, "timestamp": suites[0].get("timestamp") if suites else None}
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_counts(relative: str) -> dict[str, int]:
    """passed / skipped / failed of a test run: a JUnit XML file, or a pytest log's summary line."""
    content = read(relative)
    if isinstance(content, dict):
        failed = content["failures"] + content["errors"]
        return {"passed": content["tests"] - failed - content["skipped"], "skipped": content["skipped"], "failed": failed}
    summaries = [line for line in content.splitlines() if re.search(r"\d+ (passed|failed)\b.* in [\d.]+s", line)]
    if not summaries:
        raise ResultsError(f"{relative}: no pytest summary line ('N passed ... in S s')")
    found = {word: int(n) for n, word in re.findall(r"(\d+) (passed|skipped|failed|errors?)\b", summaries[-1])}
    return {"passed": found.get("passed", 0), "skipped": found.get("skipped", 0),
            "failed": found.get("failed", 0) + found.get("error", 0) + found.get("errors", 0)}


def current(kind: str):
    """(manifest entry, content) of the current result of `kind`."""
    e = entry(kind)
    return e, read(e["file"], e.get("member"))


def _run_folder(relative: str) -> str:
    """The run's folder under results/gpu/ holding `relative` (results/gpu/RUN/...)."""
    parts = relative.split("/")
    return "/".join(parts[:3]) if relative.startswith(GPU_RESULTS + "/") and len(parts) > 3 else os.path.dirname(relative)


def _nearest(relative: str, names: tuple[str, ...]) -> str | None:
    """The first of `names` in the file's folder or a folder above it, up to its run's folder."""
    folder, top = os.path.dirname(relative), _run_folder(relative)
    while True:
        for name in names:
            if os.path.isfile(os.path.join(ROOT, folder, name)):
                return os.path.join(ROOT, folder, name)
        if folder == top or "/" not in folder:
            return None
        folder = os.path.dirname(folder)


def parse_date(text: str) -> tuple[str, str | None]:
    """(day, time or None) of a date as the result files write them: '2026-12-04 21:11:05 UTC',
    '2026-12-05T13:11:00+00:00', `date`'s 'Mon Nov 30 08:12:29 PM UTC 2026', or a bare day."""
    text = " ".join(text.split())
    found = re.match(r"(\d{4}-\d\d-\d\d)(?:[ T](\d\d:\d\d:\d\d))?", text)
    if found:
        return found.group(1), found.group(2)
    try:
        moment = datetime.datetime.strptime(text, "%a %b %d %I:%M:%S %p UTC %Y")
    except ValueError:
        raise ResultsError(f"cannot read the date {text!r}") from None
    return moment.strftime("%Y-%m-%d"), moment.strftime("%H:%M:%S")


def file_date(relative: str, member: str | None = None) -> tuple[str, str | None]:
    """When a result file was made: its own date (a JSON 'date', a JUnit timestamp), else the
    date.txt nearest to it in its run's folder, else the day its run's folder is named after."""
    content = read(relative, member) if relative.endswith((".json", ".tgz", ".xml")) else None
    own = (content.get("date") or content.get("timestamp")) if isinstance(content, dict) else None
    if own:
        return parse_date(own)
    date_txt = _nearest(relative, ("date.txt",))
    if date_txt:
        with open(date_txt, encoding="utf-8") as f:
            return parse_date(f.read().strip())
    found = re.search(r"/(\d{4}-\d\d-\d\d)-", "/" + relative)
    if not found:
        raise ResultsError(f"{relative}: no date (no 'date' field, no date.txt, no dated folder)")
    return found.group(1), None


def file_device(relative: str, member: str | None = None) -> str:
    """The GPU a result file was made on: its JSON 'device', else the nearest devices.txt /
    device.txt (its first line naming an NVIDIA device, without index, UUID or driver)."""
    content = read(relative, member) if relative.endswith((".json", ".tgz")) else None
    if isinstance(content, dict) and content.get("device"):
        return content["device"]
    listing = _nearest(relative, ("devices.txt", "device.txt"))
    if listing:
        with open(listing, encoding="utf-8") as f:
            for line in f:
                if "NVIDIA" in line:
                    return re.sub(r"^GPU \d+: ", "", line.strip()).split(" (UUID")[0].split(",")[0].strip()
    raise ResultsError(f"{relative}: no device (no 'device' field, no devices.txt naming an NVIDIA GPU)")


# The files each kind of result is written to: a kind's runs are the files of these names under results/gpu/.
KIND_FILES = {
    "kernels": ("ops.json",),
    "fp16_gemm": ("fp16_gemm.json",),
    "models": ("untuned-models.json", "models.tgz"),
    "regions": ("bench.json",),
    "gpu_tests": ("junit.xml", "gpu-tests.xml", "gpu-tests.log"),
    "fuzz": ("fuzz-summary.json", "cuda-cluster-summary.json"),
    "conformance": ("conformance.json",),
    "tutorials": ("03_on_the_gpu.out",),
    "symbolic_models": ("symbolic-gpu.json",),
    "fuzz_symbolic": ("symbolic-fuzz-summary.json",),
    "attention": ("attention.json",),
    "decoder": ("decoder.json",),
}
MODELS_MEMBER = "untuned-models.json"  # the models report inside a run's models.tgz


def runs_of(kind: str) -> list[tuple[str, str | None]]:
    """(file, member of an archive or None) of every committed run of `kind`."""
    found = []
    for folder, _, files in os.walk(os.path.join(ROOT, GPU_RESULTS)):
        for name in sorted(set(files) & set(KIND_FILES[kind])):
            relative = os.path.relpath(os.path.join(folder, name), ROOT).replace(os.sep, "/")
            member = None
            if name.endswith(".tgz"):
                with tarfile.open(os.path.join(ROOT, relative)) as archive:
                    member = next((n for n in archive.getnames() if n.endswith(MODELS_MEMBER)), None)
                if member is None:
                    continue
            found.append((relative, member))
    return sorted(found)


def _later(a: tuple[str, str | None], b: tuple[str, str | None]) -> bool:
    """Whether date `a` is later than `b` (a time counts only where both have one)."""
    if a[0] != b[0]:
        return a[0] > b[0]
    return a[1] is not None and b[1] is not None and a[1] > b[1]


def newer_runs(kind: str) -> list[str]:
    """The committed runs of `kind` newer than the one the manifest names, as 'FILE (DATE)'."""
    e = entry(kind)
    named = file_date(e["file"], e.get("member"))
    newer = []
    for relative, member in runs_of(kind):
        date = file_date(relative, member)
        if _later(date, named):
            newer.append(f"{relative}{f' ({member})' if member else ''} ({' '.join(filter(None, date))})")
    return newer


def source(kind: str) -> str:
    """'`FILE`, DEVICE, DATE' of the current result of `kind`."""
    e = entry(kind)
    where = f"`{e['file']}`" + (f" (`{e['member']}`)" if e.get("member") else "")
    return f"{where}, {e['device']}, {e['date']}"


# -- the generated blocks ---------------------------------------------------------------------------------------
def sources_table() -> str:
    lines = ["| result | file | date | device |", "| --- | --- | --- | --- |"]
    for kind, e in manifest().items():
        member = f" (`{e['member']}`)" if e.get("member") else ""
        lines.append(f"| {e['what']} | `{e['file']}`{member} | {e['date']} | {e['device']} |")
    return "\n".join(lines)


def kernel_rows() -> list[tuple[str, dict]]:
    return list(current("kernels")[1]["ops"].items())


def kernel_table() -> str:
    _, data = current("kernels")
    limits = data.get("limits", {})
    ok = sum(1 for _, row in kernel_rows() if row.get("matches_reference"))
    lines = [f"{data['method']}. The limits: the FP32 peak ({limits['flops'] / 1e12:.1f} TFLOP/s) for GEMM-like ops, "
             f"the 16-bit tensor-core peak ({limits['flops_float16'] / 1e12:.0f} TFLOP/s) for 16-bit ones, the "
             f"memory bandwidth ({limits['bytes'] / 1e12:.2f} TB/s) for the rest, GEMVs included. {ok} of {len(data['ops'])} "
             f"kernels match their numpy reference.", "",
             "| case | simaccel | achieved | of the limit | torch | simaccel / torch |",
             "| --- | --- | --- | --- | --- | --- |"]
    for case, row in kernel_rows():
        unit = "TFLOP/s" if row["unit"] == "FLOP/s" else "TB/s"
        limit = f"{row['fraction_of_limit']:.0%}" if row.get("fraction_of_limit") else "-"
        torch = f"{row['torch_us']:.1f} us | {row['median_us'] / row['torch_us']:.2f}x" if row.get("torch_us") else "- | -"
        lines.append(f"| {case} | {row['median_us']:.1f} us | {row['achieved'] / 1e12:.2f} {unit} | {limit} | {torch} |")
    return "\n".join(lines)


def gemm_table() -> str:
    _, data = current("fp16_gemm")
    lines = ["Each result checked against torch's float32 product (the error is of the result's scale); "
             "cuBLAS is torch's float16 matmul, timed in the same run.", "",
             "| GEMM | tile | simaccel | cuBLAS | simaccel / cuBLAS | error |", "| --- | --- | --- | --- | --- | --- |"]
    for row in data["rows"]:
        lines.append(f"| {row['case']} | 128x{row['bn']} | {row['ms'] * 1e3:.1f} us, {row['tflops']:.0f} TFLOP/s | "
                     f"{row['cublas_ms'] * 1e3:.1f} us, {row['cublas_tflops']:.0f} TFLOP/s | {row['ratio']:.2f}x | "
                     f"{row['max_rel_error']:.1e} |")
    return "\n".join(lines)


def model_summary() -> dict:
    """What the current models file says as a whole: how many matched TVM alone, ran as one
    region with nothing left on TVM, and at or below TVM alone's time; the fastest and slowest."""
    _, data = current("models")
    timed = {name: m for name, m in data["models"].items()
             if "tvm_only" in m.get("median_us", {}) and "simaccel_native" in m.get("median_us", {})}
    ratio = {name: m["median_us"]["simaccel_native"] / m["median_us"]["tvm_only"] for name, m in timed.items()}
    kernel_slower = {}
    for name, m in timed.items():
        kernels = m.get("kernels") or {}
        ours, theirs = (kernels.get(mode, {}).get("kernel_us_per_call") for mode in ("simaccel_native", "tvm_only"))
        if ours and theirs and ours > theirs:
            kernel_slower[name] = (ours, theirs)
    return {"models": len(data["models"]), "timed": len(timed), "ratio": ratio,
            "matched": sum(1 for m in data["models"].values() if m.get("check") == "ok"),
            "one_region": sum(1 for m in data["models"].values()
                              if m.get("partition", {}).get("regions") == 1 and not m["partition"].get("kept_total")),
            "at_or_below": sum(1 for r in ratio.values() if r <= 1.0),
            "fastest": min(ratio, key=ratio.get), "slowest": max(ratio, key=ratio.get), "kernel_slower": kernel_slower,
            "method": data["method"]}


def model_table() -> str:
    s, (_, data) = model_summary(), current("models")
    n, r = s["models"], s["ratio"]
    lines = [f"{s['matched']} of {n} models match TVM alone; {s['one_region']} of {n} run as one region with "
             f"nothing left on TVM; simaccel takes {r[s['fastest']]:.2f}x ({s['fastest']}) to {r[s['slowest']]:.2f}x "
             f"({s['slowest']}) of TVM alone's time: {s['at_or_below']} of {s['timed']} at or below 1.0x "
             f"({s['method']})."]
    if s["kernel_slower"]:
        slower = "; ".join(f"{name} ({ours:,.0f} against {theirs:,.0f} us)" for name, (ours, theirs) in s["kernel_slower"].items())
        lines[0] += (f" In GPU kernel time {len(s['kernel_slower'])} of {n} take longer than TVM alone's kernels: "
                     f"{slower}.")
    lines += ["", "| model | TVM alone (us) | simaccel (us) | simaccel / TVM alone | GPU kernels (us), TVM alone / "
              "simaccel | regions | ops left on TVM | result |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, m in data["models"].items():
        times, kernels = m.get("median_us", {}), m.get("kernels") or {}
        tvm, ours = times.get("tvm_only"), times.get("simaccel_native")
        k_tvm, k_ours = (kernels.get(mode, {}).get("kernel_us_per_call") for mode in ("tvm_only", "simaccel_native"))
        partition = m.get("partition", {})
        kept = ", ".join(f"{op} x{k['count']}" for op, k in partition.get("kept", {}).items()) or "none"
        lines.append(f"| {name} | {_us(tvm)} | {_us(ours)} | {f'{ours / tvm:.2f}x' if tvm and ours else '-'} | "
                     f"{_us(k_tvm)} / {_us(k_ours)} | {partition.get('regions', '-')} | {kept} | "
                     f"{m.get('check', '-') if 'error' not in m else 'failed'} |")
    return "\n".join(lines + ["", "Each model's partition, kernel launches and slowest kernels are in the run's "
                              "`untuned-models.md`, beside its JSON report."])


def _us(value) -> str:
    return "-" if value is None else f"{value:,.0f}"


def pytorch_models_table() -> str:
    """The `simaccel demo --model` table of docs/pytorch.md (its four models) from the current models file."""
    from simaccel.tvm_integration.tools.torch_models import MODEL_NAMES

    e, data = current("models")
    lines = [f"| `--model` | input | regions (kept on TVM) | {e['device']}, native regions vs TVM alone |",
             "| --- | --- | --- | --- |"]
    for name in MODEL_NAMES:
        m = data["models"][name]
        kept = ", ".join(f"{op} x{k['count']}" for op, k in m["partition"].get("kept", {}).items()) or "none"
        ratio = m["median_us"]["simaccel_native"] / m["median_us"]["tvm_only"]
        lines.append(f"| `{name}` | {'x'.join(map(str, m['input']))} | {m['partition']['regions']} ({kept}) | "
                     f"{ratio:.2f}x, max error {m['max_abs_error_vs_tvm_only']:.1e} |")
    return "\n".join(lines + ["", f"The GPU figures: {data['method']} ({source('models')})."])


def _region_case(name: str) -> str:
    """A `simaccel bench` case as words, from bench's own shapes."""
    from simaccel.tvm_integration.tools.bench import CONV_SHAPE, GEMM_SIZE

    if name in GEMM_SIZE:
        return f"matmul+relu {GEMM_SIZE[name]}^3"
    if name in CONV_SHAPE:
        n, c, size, groups = CONV_SHAPE[name]
        return f"{'depthwise ' if groups == c else ''}conv2d+bias+relu b{n} {size}x{size}x{c}"
    return "the demo CNN, batch 8" if name == "demo_f32" else name


def regions_table() -> str:
    _, data = current("regions")
    modes = ("tvm_only", "simaccel_native", "simaccel_zero_copy", "simaccel_staged", "torch")
    equal = sum(1 for c in data["cases"].values() if c.get("native_equals_python"))
    lines = [f"{data['method'][:1].upper()}{data['method'][1:]}; the ratio to TVM alone in parentheses. The native regions give exactly the Python "
             f"engine's result in {equal} of {len(data['cases'])} cases.", "",
             "| case | TVM alone | simaccel native | Python engine, zero-copy | Python engine, host-staged | torch |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, case in data["cases"].items():
        cells = []
        for mode in modes:
            timed = case["modes"].get(mode)
            if timed is None:
                cells.append("-")
                continue
            ratio = case["time_ratio_vs_tvm_only"][mode]
            cells.append(f"{timed['median_us']:,.0f} us" + ("" if mode == "tvm_only" else f" ({ratio:.2f}x)"))
        lines.append(f"| {_region_case(name)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _counts(counts: dict) -> str:
    return ", ".join(f"{n} {what}" for what, n in counts.items())


def runs_list() -> str:
    tests_entry = entry("gpu_tests")
    tests = test_counts(tests_entry["file"])
    fuzz_entry, fuzz = current("fuzz")
    conf_entry, conf = current("conformance")
    tutorial = entry("tutorials")
    return "\n".join([
        f"- **Tests** ({source('gpu_tests')}): {tests_entry['what']}: **{tests['passed']} passed**, "
        f"{tests['skipped']} skipped, {tests['failed']} failed.",
        f"- **Fuzz** ({source('fuzz')}): {fuzz['cases']} cases, engines {' and '.join(fuzz['engines'])}, "
        f"{' and '.join(fuzz['dtypes'])}, on {fuzz['executor']}: {_counts(fuzz['counts'])}.",
        f"- **Conformance** ({source('conformance')}): {len(conf['models'])} models of the zoo "
        f"({' and '.join(conf['zoo'])}, size {conf['size']}), engine {' and '.join(conf['engines'])}, on {conf['executor']}: "
        f"{_counts(conf['counts'])}.",
        f"- **Tutorial 3** ({source('tutorials')}): its output, every GPU step run.",
        _symbolic_fuzz_line(),
    ])


def _symbolic_fuzz_line() -> str:
    _, fuzz = current("fuzz_symbolic")
    return (f"- **Fuzz, symbolic sizes** ({source('fuzz_symbolic')}): {fuzz['cases']} cases, engine "
            f"{' and '.join(fuzz['engines'])}, {fuzz['symbolic_cases']} of them with symbolic sizes (a batch, and a "
            f"sequence where the model has one), one build each run at {fuzz['symbolic_sizes_run']} size points in all: "
            f"{_counts(fuzz['counts'])}.")


def history_table() -> str:
    """Every run's folder under results/gpu/ with its README's title and the current results it holds."""
    holds: dict[str, list[str]] = {}
    for kind, e in manifest().items():
        holds.setdefault(_run_folder(e["file"]), []).append(kind)
    lines = ["| folder | what was run | current results |", "| --- | --- | --- |"]
    for name in sorted(os.listdir(os.path.join(ROOT, GPU_RESULTS))):
        folder = f"{GPU_RESULTS}/{name}"
        readme = os.path.join(ROOT, folder, "README.md")
        if not os.path.isdir(os.path.join(ROOT, folder)):
            continue
        if not os.path.isfile(readme):
            raise ResultsError(f"{folder} has no README.md: every run's folder says what it holds and how it was made")
        with open(readme, encoding="utf-8") as f:
            title = f.readline().strip().lstrip("#").strip()
        lines.append(f"| `{folder}/` | {title.replace('|', '/')} | {', '.join(holds.get(folder, [])) or '-'} |")
    return "\n".join(lines)


# The timing model's validation (docs/timing-model.md): the classes of bench --ops cases.
def case_class(case: str) -> str:
    if case.startswith(("gemm", "dense")):
        return "gemm"
    return "convolution" if case.startswith(("conv", "depthwise", "grouped")) else "bandwidth"


def timing_rows() -> list[dict]:
    from simaccel import DeviceProfile
    from simaccel.tvm_integration.tools.timing_validation import rows

    return rows(current("kernels")[1], DeviceProfile.load(os.path.join(ROOT, kernels_profile())))


def timing_source() -> str:
    return (f"Compared with the kernel times of the current `simaccel bench --ops` run ({source('kernels')}: "
            f"simaccel's kernels and torch's in the same run). Made by `python -m "
            f"simaccel.tvm_integration.tools.timing_validation {entry('kernels')['file']} {kernels_profile()}`:")


def timing_table() -> str:
    from simaccel.tvm_integration.tools.timing_validation import table

    return table(timing_rows())


def _span(values) -> str:
    return f"{min(values):.2f}-{max(values):.2f}x"


def timing_conclusions() -> str:
    rows_ = timing_rows()
    ratios = [r["ratio"] for r in rows_] + [r["torch_ratio"] for r in rows_ if r["torch_ratio"]]
    below = [r["case"] for r in rows_ if r["ratio"] < 1 or (r["torch_ratio"] or 1) < 1]
    by = {c: [r for r in rows_ if case_class(r["case"]) == c] for c in ("gemm", "convolution", "bandwidth")}
    if below:
        bound = (f"{len(below)} cases were measured below it ({', '.join(below)}): the profile's figures are "
                 f"lower than the GPU's, and the model is not a lower bound there")
    else:
        bound = f"every measured time is at or above it ({min(ratios):.2f}x to {max(ratios):.1f}x)"
    worst = max(by["convolution"], key=lambda r: r["ratio"])
    furthest = max(max(r["ratio"], r["torch_ratio"] or 0) for r in by["convolution"])
    near = [r["ratio"] for c in ("gemm", "bandwidth") for r in by[c]] + \
           [r["torch_ratio"] for c in ("gemm", "bandwidth") for r in by[c] if r["torch_ratio"]]
    return (f"What it says: the model is a roofline at peak figures, so it is meant as a lower bound; here "
            f"{bound}. On the compute-bound GEMMs and the bandwidth-bound kernels (elementwise, softmax, layer "
            f"norm, reductions, permutes, pooling) the measured kernel time is within {max(near):.1f}x of the "
            f"modeled time (simaccel's GEMMs {_span([r['ratio'] for r in by['gemm']])}, torch's "
            f"{_span([r['torch_ratio'] for r in by['gemm'] if r['torch_ratio']])}; bandwidth-bound kernels "
            f"{_span([r['ratio'] for r in by['bandwidth']])} for simaccel, "
            f"{_span([r['torch_ratio'] for r in by['bandwidth'] if r['torch_ratio']])} for torch). Convolutions "
            f"are where real kernels are furthest from the roof, up to {furthest:.1f}x (simaccel's furthest, "
            f"{worst['case']}: {worst['ratio']:.2f}x, torch's {worst['torch_ratio']:.2f}x there): small spatial "
            f"sizes leave SMs idle, which a roofline does not see. Read a modeled time as \"at best\"; read ratios between "
            f"profiles with more trust than absolute times.")


def symbolic_table() -> str:
    """docs/symbolic-shapes.md's table: each dynamic model at each size, native symbolic regions
    against TVM alone's dynamic build, from the current symbolic_models file."""
    e, data = current("symbolic_models")
    lines = ["| model | input sizes | simaccel | TVM alone | ratio | matches TVM alone, torch | host bytes |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in data["models"]:
        ok = "yes, yes" if row["vs_tvm"]["ok"] and row["vs_torch"]["ok"] else \
            f"{'yes' if row['vs_tvm']['ok'] else 'NO'}, {'yes' if row['vs_torch']['ok'] else 'NO'}"
        lines.append(f"| `{row['model']}` | {' x '.join(map(str, row['size']))} | {row['simaccel_us']:,.1f} us | "
                     f"{row['tvm_us']:,.1f} us | {row['ratio']:.2f}x | {ok} | {row['host_bytes']} |")
    graphs = data["graphs"].get("dyn_mlp", [])
    b = data["binding"]
    return "\n".join(lines + [
        "", f"One build of each model (`scripts/symbolic_gpu_build.py`), run by `scripts/symbolic_gpu_run.py` with "
        f"medians of {data['repeat']} interleaved calls ({source('symbolic_models')}). A CUDA graph captured per "
        f"shape on TVM's stream and replayed with new inputs matched TVM alone in {sum(g.get('ok', False) for g in graphs)} "
        f"of {len(graphs)} replays. Binding sizes natively costs {b['cost_us']:.2f} us a call: a one-op region "
        f"takes {b['symbolic_us']:.2f} us symbolic against {b['static_us']:.2f} us static (median of 3 x 2000 calls)."])


def attention_table() -> str:
    """docs/llm.md's attention table: simaccel.attention's kernel against torch's SDPA, each case
    in float16 and bfloat16, from the current attention file."""
    e, data = current("attention")
    lines = ["| case | heads (query / key-value) x head dim | float16 | bfloat16 | torch (float16) | ratio (float16, bfloat16) | matches torch |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    by_case: dict = {}
    for row in data["rows"]:
        by_case.setdefault(row["case"], {})[row["dtype"]] = row
    for case, rows in by_case.items():
        f16, bf16 = rows["float16"], rows["bfloat16"]
        heads = f"{f16['heads']} / {f16.get('kv_heads', f16['heads'])} x {f16['head_dim']}"
        ok = "yes" if f16["matches_torch"] and bf16["matches_torch"] else "NO"
        lines.append(f"| {case} (batch {f16['batch']}, {f16['S']} x {f16['T']}) | {heads} | {f16['ms'] * 1e3:,.1f} us | "
                     f"{bf16['ms'] * 1e3:,.1f} us | {f16['torch_ms'] * 1e3:,.1f} us | {f16['ratio']:.2f}x, "
                     f"{bf16['ratio']:.2f}x | {ok} |")
    return "\n".join(lines + ["", f"`scripts/attention_gpu.py`: CUDA events, medians of 20 samples of 5 calls queued "
                                  f"behind a spin kernel, torch's SDPA in the same run ({source('attention')})."])


def decoder_table() -> str:
    """docs/llm.md's decoder table: examples/decoder.py's model, simaccel against TVM alone and
    torch, prefill and decode, from the current decoder file."""
    e, data = current("decoder")
    c = data["config"]
    lines = ["| dtype | step | simaccel | TVM alone | torch | against TVM alone | against torch | matches TVM alone, torch |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in data["rows"]:
        us, checks = row["us"], row["checks"]
        step = f"prefill of {row['S']}" if row["case"] == "prefill" else f"decode onto a cache of {row['M']}"
        ok = ", ".join("yes" if checks[k]["ok"] else "NO" for k in ("tvm", "torch"))
        lines.append(f"| {row['dtype']} | {step} | {us['simaccel']:,.0f} us | {us['tvm']:,.0f} us | {us['torch']:,.0f} us | "
                     f"{row['vs_tvm']:.2f}x | {row['vs_torch']:.2f}x | {ok} |")
    return "\n".join(lines + ["", f"The model at {c['layers']} layers, hidden {c['hidden']}, {c['heads']} query heads "
                                  f"over {c['kv_heads']} key/value heads, vocabulary {c['vocab']}; wall time of one call "
                                  f"and a sync, medians of interleaved rounds (`scripts/decoder_gpu.py`, "
                                  f"{source('decoder')})."])


def targets_table() -> str:
    """docs/llm.md's table of the LLM issue's targets: each one's figure from the current kernels,
    attention and decoder files, and whether it is met."""
    _, ops = current("kernels")
    _, attention = current("attention")
    _, decoder = current("decoder")
    rows = []

    def add(target: str, figure: str, met: bool) -> None:
        rows.append(f"| {target} | {figure} | {'yes' if met else '**no**'} |")

    for kind in ("prefill", "decode"):
        steps = [r for r in decoder["rows"] if r["case"] == kind]
        worst = max(steps, key=lambda r: r["vs_tvm"])
        dtypes = ", ".join(dict.fromkeys(r["dtype"] for r in steps))
        add(f"the decoder's {kind} at or below TVM alone's time ({len(steps)} steps: {dtypes})",
            f"{worst['vs_tvm']:.2f}x at most ({worst['dtype']}, "
            f"{'a prompt of ' + str(worst['S']) if kind == 'prefill' else 'a cache of ' + str(worst['M'])})",
            worst["vs_tvm"] <= 1.0)
    gemvs = {case: row for case, row in ops["ops"].items() if case.startswith("gemv")}
    if gemvs:
        low = min(gemvs, key=lambda case: gemvs[case]["fraction_of_limit"])
        add(f"decode GEMVs at 80% or more of HBM's bandwidth ({len(gemvs)} layers)",
            f"{gemvs[low]['fraction_of_limit']:.0%} at least ({low}, {gemvs[low]['achieved'] / 1e12:.2f} TB/s)",
            gemvs[low]["fraction_of_limit"] >= 0.8)
    for dtype in ("bfloat16", "float16"):
        row = ops["ops"].get(f"gemm 4096^3 {dtype}")
        if row and row.get("torch_us"):
            speed = row["torch_us"] / row["median_us"]
            add(f"the {dtype} GEMM at 4096^3 at 0.9x cuBLAS's speed or more",
                f"{speed:.2f}x ({row['median_us']:.0f} us against {row['torch_us']:.0f} us)", speed >= 0.9)
    for case in ("prefill 2048", "decode 4096", "decode 4096 gqa"):
        found = [r for r in attention["rows"] if r["case"] == case]
        if found:
            worst = max(found, key=lambda r: r["ratio"])
            add(f"attention, {case}, at most 1.5x torch's SDPA",
                f"{worst['ratio']:.2f}x ({worst['dtype']}: {worst['ms'] * 1e3:.1f} us against {worst['torch_ms'] * 1e3:.1f} us)",
                worst["ratio"] <= 1.5)
    return "\n".join(["| target | measured | met |", "| --- | --- | --- |", *rows, "",
                      f"From {source('decoder')}, {source('kernels')} and {source('attention')}."])


def readme_sentence() -> str:
    from simaccel.tvm_integration.tools.torch_models import UNTUNED_NAMES

    s, models, tests_entry = model_summary(), entry("models"), entry("gpu_tests")
    tests = test_counts(tests_entry["file"])
    untuned = sum(1 for name in s["ratio"] if name in UNTUNED_NAMES)
    each = "all" if s["at_or_below"] == s["timed"] else f"{s['at_or_below']} of"
    return (f"on an {models['device']} ({models['date']}) {s['matched']} of {s['models']} torch.export models "
            f"({untuned} that the project never tuned for) match TVM alone and {each} {s['timed']} run at or below "
            f"TVM alone's time ({s['ratio'][s['fastest']]:.2f}x to {s['ratio'][s['slowest']]:.2f}x of it); the "
            f"latest GPU test run ({tests_entry['device']}, {tests_entry['date']}): "
            f"{tests['passed']} passed, {tests['failed']} failed")


# Each page's generated blocks: name -> the function that writes it.
PAGES = {
    "README.md": {"gpu-sentence": readme_sentence},
    "docs/gpu.md": {"sources": sources_table, "kernels": kernel_table, "fp16-gemm": gemm_table,
                    "models": model_table, "regions": regions_table, "runs": runs_list, "history": history_table},
    "docs/pytorch.md": {"pytorch-models": pytorch_models_table},
    "docs/symbolic-shapes.md": {"symbolic-models": symbolic_table},
    "docs/llm.md": {"llm-targets": targets_table, "llm-attention": attention_table, "llm-decoder": decoder_table},
    "docs/timing-model.md": {"timing-source": timing_source, "timing": timing_table,
                             "timing-conclusions": timing_conclusions},
}


def render(text: str, blocks: dict, page: str = "page") -> str:
    """`text` with each generated block written anew: a block on lines of its own keeps them
    (blank lines around its content), an inline one stays inline. Every block of `blocks` must be
    in the text, and every block in the text must be one of them."""
    found = [m.group(2) for m in BLOCK.finditer(text)]
    missing, unknown = sorted(set(blocks) - set(found)), sorted(set(found) - set(blocks))
    if missing or unknown or len(found) != len(set(found)):
        raise ResultsError(f"{page}: generated blocks missing {missing}, unknown {unknown}, found {found}")

    def block(m: re.Match) -> str:
        body = blocks[m.group(2)]()
        return m.group(1) + (f"\n\n{body}\n\n" if m.group(3).startswith("\n") else body) + m.group(4)

    return BLOCK.sub(block, text)


def stale_pages(write: bool = False) -> list[str]:
    """The pages whose committed blocks differ from what the generator writes (rewritten if `write`)."""
    stale = []
    for page, blocks in PAGES.items():
        path = os.path.join(ROOT, page)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        new = render(text, blocks, page)
        if new != text:
            stale.append(page)
            if write:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new)
    return stale


# -- the charts (site only) -------------------------------------------------------------------------------------
# Each chart follows its block on the site: block name -> (file in CHART_FOLDER, alternative text).
CHART_FOLDER = "generated_charts"
CHARTS = {
    "kernels": ("kernels.png", "each kernel: its share of the GPU's limit, and its time against torch's"),
    "models": ("models.png", "each model: simaccel's time against TVM alone's, wall clock and GPU kernels"),
    "timing": ("timing.png", "each bench --ops case: measured time against the timing model's"),
}


def _pyplot():
    from simaccel.tvm_integration.tools.bench import pyplot

    plt = pyplot()
    if plt is None:
        raise ResultsError("the site's charts need matplotlib: pip install '.[docs]'")
    return plt


def _save(fig, path: str) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    fig.clf()


def kernel_chart(path: str) -> None:
    plt = _pyplot()
    rows = kernel_rows()
    e = entry("kernels")
    labels = [case for case, _ in rows]
    colors = ["tab:blue" if row["unit"] == "FLOP/s" else "tab:orange" for _, row in rows]
    fig, (left, right) = plt.subplots(1, 2, sharey=True, figsize=(10, 0.3 * len(rows) + 1.6))
    left.barh(labels, [100 * (row.get("fraction_of_limit") or 0) for _, row in rows], color=colors)
    left.set_xlabel("% of the limit")
    left.set_xlim(0, 100)
    left.invert_yaxis()
    left.legend(handles=[plt.Rectangle((0, 0), 1, 1, color="tab:blue"), plt.Rectangle((0, 0), 1, 1, color="tab:orange")],
                labels=["of the compute peak", "of the memory bandwidth"], loc="lower right", fontsize=8)
    ratios = [row["median_us"] / row["torch_us"] if row.get("torch_us") else 0 for _, row in rows]
    right.barh(labels, ratios, color=["tab:green" if r <= 1 else "tab:red" for r in ratios])
    right.axvline(1.0, color="black", linewidth=0.8)
    right.set_xlabel("simaccel's time / torch's (below 1: faster)")
    fig.suptitle(f"simaccel's kernels, {e['device']}, {e['date']}")
    _save(fig, path)


def _paired_bars(ax, labels, upper, lower, start=0) -> None:
    """Two horizontal bars per label, `upper` above `lower`, each (values, legend label, colour),
    from `start` to each value; a black line at 1 (as fast as the peer or the model)."""
    y = range(len(labels))
    for offset, (values, label, color) in ((-0.2, upper), (0.2, lower)):
        ax.barh([i + offset for i in y], [v - start for v in values], left=start or None, height=0.4, label=label,
                color=color)
    ax.set_yticks(list(y), labels)
    ax.invert_yaxis()
    ax.axvline(1.0, color="black", linewidth=0.8)


def model_chart(path: str) -> None:
    plt = _pyplot()
    _, data = current("models")
    e = entry("models")
    names = [n for n, m in data["models"].items() if {"tvm_only", "simaccel_native"} <= set(m.get("median_us", {}))]
    wall = [data["models"][n]["median_us"]["simaccel_native"] / data["models"][n]["median_us"]["tvm_only"] for n in names]
    kernels = []
    for n in names:
        k = data["models"][n].get("kernels") or {}
        ours, theirs = (k.get(mode, {}).get("kernel_us_per_call") for mode in ("simaccel_native", "tvm_only"))
        kernels.append(ours / theirs if ours and theirs else 0)
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(names) + 1.6))
    _paired_bars(ax, names, (wall, "wall clock per call", "tab:blue"),
                 (kernels, "GPU kernel time per call", "tab:gray"))
    ax.set_xlabel("simaccel's time / TVM alone's (below 1: faster)")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(f"torch.export models, {e['device']}, {e['date']}")
    _save(fig, path)


def timing_chart(path: str) -> None:
    plt = _pyplot()
    rows_ = timing_rows()
    e = entry("kernels")
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(rows_) + 1.6))
    # Bars start at the roofline (1) and end at measured / modeled, on a log scale.
    _paired_bars(ax, [f"{r['case']} ({r['bound']})" for r in rows_],
                 ([r["ratio"] for r in rows_], "simaccel", "tab:blue"),
                 ([r["torch_ratio"] or 1 for r in rows_], "torch", "tab:gray"), start=1)
    ax.set_xscale("log")
    top = max(max(r["ratio"], r["torch_ratio"] or 0) for r in rows_)
    low = min(0.9, min(r["ratio"] for r in rows_) * 0.9)
    ticks = [t for t in (0.25, 0.5, 1, 2, 4, 8, 16, 32, 64) if low <= t <= top * 1.2]
    ax.set_xlim(low, top * 1.2)
    ax.set_xticks(ticks, [f"{t:g}x" for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("measured time / modeled time (log scale; 1x = the roofline)")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(f"The timing model against {e['device']} ({e['date']})")
    _save(fig, path)


DRAW = {"kernels": kernel_chart, "models": model_chart, "timing": timing_chart}


def draw_charts(folder: str) -> list[str]:
    os.makedirs(folder, exist_ok=True)
    paths = []
    for block, (name, _) in CHARTS.items():
        paths.append(os.path.join(folder, name))
        DRAW[block](paths[-1])
    return paths


# -- Sphinx ------------------------------------------------------------------------------------------------------
def _charts_after_blocks(app, docname, source) -> None:
    """source-read: each block that has a chart is followed by it on the site."""
    def add(m: re.Match) -> str:
        chart = CHARTS.get(m.group(2))
        return m.group(0) + (f"\n\n![{chart[1]}]({CHART_FOLDER}/{chart[0]})\n" if chart else "")

    source[0] = BLOCK.sub(add, source[0])


def _draw(app) -> None:
    draw_charts(os.path.join(app.srcdir, CHART_FOLDER))


def setup(app):
    app.connect("builder-inited", _draw)
    app.connect("source-read", _charts_after_blocks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv not in ([], ["--check"]):
        print("usage: python docs/site_results.py [--check]", file=sys.stderr)
        return 2
    stale = stale_pages(write=not argv)
    if argv and stale:
        print(f"generated blocks differ from the current results in: {', '.join(stale)} "
              f"(python docs/site_results.py rewrites them)", file=sys.stderr)
        return 1
    print(f"rewrote {', '.join(stale)}" if stale and not argv else "every generated block is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
