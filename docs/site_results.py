"""Sphinx extension of the documentation site: the results page, written from the result files.

Where it sits: docs/conf.py loads it; when the build starts it writes docs/generated_results.md
(not committed) from result files committed by real GPU runs, so the site's tables are those
files' figures: the kernel table (`simaccel bench --ops`), the float16 GEMM against cuBLAS, the
model table (torch.export models against TVM alone), and the timing model's validation. The
charts are the runs' own PNGs. Each table names its file, date and device.
"""

from __future__ import annotations

import json
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("SIMACCEL_REPO") or os.path.dirname(HERE)  # as docs/conf.py
RESULTS = os.path.join(ROOT, "results", "gpu")
OPS = "2026-12-03-h200-fp16-gemm/tests-ops/ops.json"
GEMM = "2026-12-03-h200-fp16-gemm/final/fp16_gemm.json"
MODELS = "2026-12-02-h200-gemv-models/run/models/untuned-models.json"
PAGE = "generated_results.md"


def _load(relative: str) -> dict:
    with open(os.path.join(RESULTS, relative), encoding="utf-8") as f:
        return json.load(f)


def _source(relative: str, data: dict) -> str:
    date = data.get("date") or open(os.path.join(RESULTS, os.path.dirname(relative), "date.txt")).read().strip()
    return f"`results/gpu/{relative}`, {data.get('device', 'NVIDIA H200')}, {date}"


def kernel_table() -> list[str]:
    data = _load(OPS)
    lines = ["## Each kernel against the GPU's limits", "",
             f"`simaccel bench --ops` ({_source(OPS, data)}): {data['method']}.", "",
             "| case | simaccel | achieved | of the limit | torch | simaccel / torch |", "| --- | --- | --- | --- | --- | --- |"]
    for case, row in data["ops"].items():
        unit = "TFLOP/s" if row["unit"] == "FLOP/s" else "TB/s"
        achieved = row["achieved"] / 1e12
        limit = f"{row['fraction_of_limit']:.0%}" if row.get("fraction_of_limit") else "-"
        torch = f"{row['torch_us']:.1f} us | {row['median_us'] / row['torch_us']:.2f}x" if row.get("torch_us") else "- | -"
        lines.append(f"| {case} | {row['median_us']:.1f} us | {achieved:.2f} {unit} | {limit} | {torch} |")
    image = os.path.join(os.path.dirname(OPS), "ops.png")
    if os.path.exists(os.path.join(RESULTS, image)):
        shutil.copy(os.path.join(RESULTS, image), os.path.join(HERE, "_static", "ops.png"))
        lines += ["", "![each kernel against its limit](_static/ops.png)"]
    return lines


def gemm_table() -> list[str]:
    data = _load(GEMM)
    lines = ["## The float16 GEMM against cuBLAS", "",
             f"`scripts/fp16_gemm_gpu.py` ({_source(GEMM, data)}); each result checked against torch's float32 product.",
             "", "| GEMM | tile | simaccel | TFLOP/s | cuBLAS | simaccel / cuBLAS |", "| --- | --- | --- | --- | --- | --- |"]
    for row in data["rows"]:
        lines.append(f"| {row['case']} | 128 x {row['bn']} | {row['ms'] * 1e3:.1f} us | {row['tflops']:.0f} | "
                     f"{row['cublas_ms'] * 1e3:.1f} us | {row['ratio']:.2f}x |")
    return lines


def model_table() -> list[str]:
    data = _load(MODELS)
    lines = ["## Models against TVM alone", "",
             f"torch.export models, one native region each ({_source(MODELS, data)}): {data['method']}.", "",
             "| model | TVM alone | simaccel | simaccel / TVM alone | result |", "| --- | --- | --- | --- | --- |"]
    for name, model in data["models"].items():
        times = model.get("median_us") or {}
        if "tvm_only" not in times or "simaccel_native" not in times:
            continue
        lines.append(f"| {name} | {times['tvm_only']:.0f} us | {times['simaccel_native']:.0f} us | "
                     f"{times['simaccel_native'] / times['tvm_only']:.2f}x | {model.get('check', '-')} |")
    return lines


def timing_table() -> list[str]:
    from simaccel import DeviceProfile
    from simaccel.tvm_integration.tools.timing_validation import rows, table

    profile = DeviceProfile.load(os.path.join(ROOT, "examples", "profiles", "h200.json"))
    return ["## The timing model against the GPU", "",
            "The H200's own figures (`examples/profiles/h200.json`) against the same kernel times "
            "([the timing model](timing-model.md) says how to read it):", "", table(rows(_load(OPS), profile))]


def write_page(app=None) -> str:
    """Write the results page; returns its path."""
    parts = ["# Results", "",
             "Every figure here is read from a result file a real GPU run committed (the folders under "
             "`results/gpu/` say how each was made); nothing is typed in by hand.", ""]
    for section in (kernel_table, gemm_table, model_table, timing_table):
        parts += section() + [""]
    path = os.path.join(HERE, PAGE)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))
    return path


def setup(app):
    app.connect("builder-inited", write_page)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
