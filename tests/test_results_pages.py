"""The figures the site and the README show are those of the current result files.

results/current.json names the current file of each kind of result; docs/site_results.py writes
the generated blocks of README.md, docs/gpu.md and docs/timing-model.md from those files. These
tests fail where a committed block is not what the generator writes, where the manifest names a
file whose own date or device differ from what it says, or a run older than one committed
since, and where a figure left in a page's prose differs from its file.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docs"))
import site_results  # noqa: E402  (docs/ is not a package)

KINDS = sorted(site_results.manifest())


def test_the_manifest_names_a_result_of_every_kind_the_pages_use():
    assert set(KINDS) == set(site_results.KIND_FILES)
    for kind in KINDS:
        e = site_results.entry(kind)
        assert {"what", "file", "date", "device"} <= set(e), kind
        assert (ROOT / e["file"]).is_file(), e["file"]


@pytest.mark.parametrize("page", sorted(site_results.PAGES))
def test_every_generated_block_is_what_the_generator_writes(page):
    text = (ROOT / page).read_text(encoding="utf-8")
    assert site_results.render(text, site_results.PAGES[page], page) == text, (
        f"{page} differs from the current results: run python docs/site_results.py")


@pytest.mark.parametrize("kind", KINDS)
def test_the_manifest_gives_each_file_s_own_date_and_device(kind):
    e = site_results.entry(kind)
    assert site_results.file_date(e["file"], e.get("member"))[0] == e["date"]
    assert site_results.file_device(e["file"], e.get("member")) == e["device"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_manifest_names_the_newest_committed_run_of_each_kind(kind):
    assert site_results.runs_of(kind), kind
    assert site_results.newer_runs(kind) == [], f"results/current.json: a newer run of {kind} is committed"


def test_a_newer_run_than_the_named_one_is_found(monkeypatch):
    """The class of the reported defect: a page reading an older file than the newest committed."""
    current = site_results.entry("kernels")["file"]
    runs = {relative: site_results.file_date(relative, member) for relative, member in site_results.runs_of("kernels")}
    oldest = min(runs, key=lambda r: (runs[r][0], runs[r][1] or ""))
    entries = copy.deepcopy(site_results.manifest())
    entries["kernels"]["file"] = oldest
    monkeypatch.setattr(site_results, "manifest", lambda: entries)
    newer = site_results.newer_runs("kernels")
    assert any(line.startswith(current + " ") for line in newer), newer
    assert not any(line.startswith(oldest + " ") for line in newer)


def test_a_block_edited_by_hand_is_written_back_and_a_missing_or_unknown_one_is_an_error():
    page = "docs/gpu.md"
    text = (ROOT / page).read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| conv 14x14x256->256"))
    edited = text.replace(row, row.replace(" us |", "1 us |", 1))
    assert edited != text
    assert site_results.render(edited, site_results.PAGES[page], page) == text
    without = re.sub(r"<!-- results:history -->.*?<!-- /results:history -->", "", text, flags=re.S)
    with pytest.raises(site_results.ResultsError, match=r"docs/gpu.md: generated blocks missing \['history'\]"):
        site_results.render(without, site_results.PAGES[page], page)
    unknown = text + "\n<!-- results:nothing -->\n<!-- /results:nothing -->\n"
    with pytest.raises(site_results.ResultsError, match=r"unknown \['nothing'\]"):
        site_results.render(unknown, site_results.PAGES[page], page)


def test_an_inline_block_stays_inline():
    text = "Before <!-- results:x -->old<!-- /results:x --> after."
    assert site_results.render(text, {"x": lambda: "new"}) == "Before <!-- results:x -->new<!-- /results:x --> after."


@pytest.mark.parametrize("text, expected", [
    ("2026-12-04 21:11:05 UTC", ("2026-12-04", "21:11:05")),
    ("2026-12-05T13:11:00.347451+00:00", ("2026-12-05", "13:11:00")),
    ("Mon Nov 30 08:12:29 PM UTC 2026", ("2026-11-30", "20:12:29")),
    ("Thu Dec  3 07:22:41 PM UTC 2026", ("2026-12-03", "19:22:41")),
    ("2026-12-02", ("2026-12-02", None)),
])
def test_the_dates_result_files_write_are_read(text, expected):
    assert site_results.parse_date(text) == expected


def test_a_test_run_s_counts_are_read_from_junit_or_from_a_pytest_log(tmp_path, monkeypatch):
    e = site_results.entry("gpu_tests")
    junit = site_results.read(e["file"]) if e["file"].endswith(".xml") else None
    if junit:
        assert sum(site_results.test_counts(e["file"]).values()) == junit["tests"]
    monkeypatch.setattr(site_results, "ROOT", str(tmp_path))
    (tmp_path / "a.log").write_text("....\n===== 1 failed, 228 passed, 1 skipped, 22 deselected in 418.33s (0:06:58) =====\n")
    assert site_results.test_counts("a.log") == {"passed": 228, "skipped": 1, "failed": 1}
    (tmp_path / "b.log").write_text("3 passed, 2 errors in 1.00s\n")
    assert site_results.test_counts("b.log") == {"passed": 3, "skipped": 0, "failed": 2}
    (tmp_path / "c.log").write_text("collected 0 items\n")
    with pytest.raises(site_results.ResultsError, match="c.log: no pytest summary line"):
        site_results.test_counts("c.log")


def test_a_date_that_cannot_be_read_is_an_error_naming_it():
    with pytest.raises(site_results.ResultsError, match="cannot read the date 'yesterday'"):
        site_results.parse_date("yesterday")


def test_a_missing_result_file_or_kind_is_an_error_naming_it(monkeypatch):
    with pytest.raises(site_results.ResultsError, match="result file results/gpu/none/ops.json does not exist"):
        site_results.read("results/gpu/none/ops.json")
    with pytest.raises(site_results.ResultsError, match="names no current result of kind 'speed'"):
        site_results.entry("speed")


def test_every_run_folder_is_listed_and_one_without_its_readme_is_an_error(tmp_path, monkeypatch):
    history = site_results.history_table()
    folders = sorted(p.name for p in (ROOT / "results" / "gpu").iterdir() if p.is_dir())
    assert [line.split("`")[1] for line in history.splitlines()[2:]] == [f"results/gpu/{f}/" for f in folders]
    (tmp_path / "results" / "gpu" / "2027-01-01-h200-new").mkdir(parents=True)
    shutil.copy(ROOT / site_results.MANIFEST, tmp_path / site_results.MANIFEST)
    monkeypatch.setattr(site_results, "ROOT", str(tmp_path))
    with pytest.raises(site_results.ResultsError, match="results/gpu/2027-01-01-h200-new has no README.md"):
        site_results.history_table()


def test_the_readme_states_what_the_models_file_says():
    """The README's GPU sentence: how many models match and run at or below TVM alone."""
    e = site_results.entry("models")
    models = site_results.read(e["file"], e.get("member"))["models"]
    ratios = [m["median_us"]["simaccel_native"] / m["median_us"]["tvm_only"] for m in models.values()]
    at_or_below = sum(r <= 1.0 for r in ratios)
    sentence = re.search(r"<!-- results:gpu-sentence -->(.*?)<!-- /results", (ROOT / "README.md").read_text()).group(1)
    each = "all" if at_or_below == len(ratios) else f"{at_or_below} of"
    assert f"{each} {len(ratios)} run at or below TVM alone's time" in sentence
    assert f"{min(ratios):.2f}x to {max(ratios):.2f}x" in sentence


def test_the_pytorch_page_s_table_would_show_the_current_models_file():
    """docs/pytorch.md's table shows each model's ratio from the current models file."""
    e = site_results.entry("models")
    models = site_results.read(e["file"], e.get("member"))["models"]
    table = site_results.pytorch_models_table()
    for name in ("resnet18", "mobilenet_v2", "transformer_encoder", "mlp_mixer"):
        ratio = models[name]["median_us"]["simaccel_native"] / models[name]["median_us"]["tvm_only"]
        assert f"| `{name}` |" in table and f"{ratio:.2f}x, max error" in table, name


def test_the_llm_targets_are_judged_from_their_files_figures(monkeypatch):
    """A target is met where its figure is within its bound, and missed where not: a GEMV at 79%
    of HBM, a GEMM at 0.9x cuBLAS, a prefill 1.6x torch, a decode step slower than TVM alone."""
    def attention(case, ratio):
        return {"case": case, "dtype": "float16", "ratio": ratio, "ms": ratio * 0.01, "torch_ms": 0.01}

    files = {
        "decoder": {"rows": [{"case": "prefill", "dtype": "float32", "S": 128, "M": 0, "vs_tvm": 0.5},
                             {"case": "decode", "dtype": "bfloat16", "S": 1, "M": 500, "vs_tvm": 1.01}]},
        "kernels": {"ops": {"gemv a": {"fraction_of_limit": 0.79, "achieved": 2.6e12},
                            "gemv b": {"fraction_of_limit": 0.95, "achieved": 3.2e12},
                            "gemm 4096^3 bfloat16": {"median_us": 100.0, "torch_us": 90.0}}},
        "attention": {"rows": [attention("prefill 2048", 1.6), attention("decode 4096", 1.5)]},
    }
    monkeypatch.setattr(site_results, "current", lambda kind: ({}, files[kind]))
    monkeypatch.setattr(site_results, "source", lambda kind: kind)
    met = {line.split(" | ")[0][2:]: line.rsplit(" | ", 1)[1][:-2] for line in site_results.targets_table().splitlines()
           if line.startswith("| ") and "---" not in line and not line.startswith("| target")}
    assert met == {"the decoder's prefill at or below TVM alone's time (1 steps: float32)": "yes",
                   "the decoder's decode at or below TVM alone's time (1 steps: bfloat16)": "**no**",
                   "decode GEMVs at 80% or more of HBM's bandwidth (2 layers)": "**no**",
                   "the bfloat16 GEMM at 4096^3 at 0.9x cuBLAS's speed or more": "yes",
                   "attention, prefill 2048, at most 1.5x torch's SDPA": "**no**",
                   "attention, decode 4096, at most 1.5x torch's SDPA": "yes"}


def test_the_timing_model_page_s_profile_figures_are_the_h200_profile_s():
    performance = json.loads((ROOT / site_results.H200_PROFILE).read_text())["performance"]
    text = " ".join((ROOT / "docs" / "timing-model.md").read_text(encoding="utf-8").split())
    assert f"{performance['peak_flops']['float32'] / 1e12:.1f} TFLOP/s float32" in text
    assert f"{performance['peak_flops']['float16'] / 1e12:.0f} TFLOP/s float16" in text
    assert f"{performance['memory_bandwidth'] / 1e12:.1f} TB/s" in text
    assert f"{performance['dma_bandwidth'] / 1e9:.1f} GB/s of a pageable round trip" in text


def test_each_gpu_s_profile_has_the_limits_its_kernel_runs_are_measured_against():
    from simaccel.tvm_integration.tools.bench_ops import LIMITS

    assert set(site_results.GPU_PROFILES) == set(LIMITS)
    for device, path in site_results.GPU_PROFILES.items():
        performance = json.loads((ROOT / path).read_text())["performance"]
        limits = LIMITS[device]
        assert performance["memory_bandwidth"] == limits["bytes"], device
        assert performance["peak_flops"]["float32"] == limits["flops"], device
        assert performance["peak_flops"]["float16"] == performance["peak_flops"]["bfloat16"] == limits["flops_float16"]


def test_the_timing_validation_table_is_the_tool_s_on_the_current_kernel_file(capsys):
    from simaccel.tvm_integration.tools.timing_validation import main

    e = site_results.entry("kernels")
    assert main([str(ROOT / e["file"]), str(ROOT / site_results.kernels_profile())]) == 0
    assert capsys.readouterr().out.strip() in (ROOT / "docs" / "timing-model.md").read_text(encoding="utf-8")


def test_the_charts_are_drawn_from_the_current_files(tmp_path):
    pytest.importorskip("matplotlib", reason="the charts need matplotlib: pip install '.[docs]'")
    paths = site_results.draw_charts(str(tmp_path))
    assert sorted(Path(p).name for p in paths) == sorted(name for name, _ in site_results.CHARTS.values())
    for path in paths:
        assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path


def test_the_front_page_gives_the_readme_s_set_up_commands():
    def commands(text):
        return re.findall(r"```bash\n(pip install [^\n]*)\n```", text)

    readme = commands((ROOT / "README.md").read_text(encoding="utf-8"))
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    assert len(readme) == 2 and commands(index) == readme
    assert index.index("](flow.svg)") < index.index("```{toctree}")


# -- figures in prose --------------------------------------------------------------------------
# A measurement: a number (or a range such as 1.07-1.37) with a unit; a ratio needs a decimal
# point ("1.35x"), so that shapes ("128 x 64") are not taken for one.
FIGURE = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)(?:\s*(?:-|/|->)\s*\d[\d,]*(?:\.\d+)?)*\s*"
                    r"(us|ms|TFLOP/s|TB/s|GB/s|MiB|x)(?![\w])")
CITATION = re.compile(r"results/(?:gpu|fuzz)/[\w./-]+")
GENERATED = re.compile(r"<!-- results:([\w-]+) -->.*?<!-- /results:\1 -->", re.S)
ON_A_DEVICE = re.compile(r"H100|H200|cuBLAS|cuDNN")
RECORD_SUFFIXES = {".json", ".md", ".log", ".txt", ".csv", ".out", ".xml"}


def _record_text(citation: str) -> str:
    path = ROOT / citation.rstrip(".,):`")
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else []
    return "".join(f.read_text(errors="replace") for f in files if f.suffix in RECORD_SUFFIXES).replace(",", "")


def prose_figures(text: str):
    """(figure, citations, the text around it) of every measurement on a device left in a page's
    prose (outside generated blocks and code): its citations are the result folders or files its
    list item names, else its paragraph's, else its section's."""
    body = re.sub(r"```.*?```", "", GENERATED.sub("", text), flags=re.S)
    for section in re.split(r"\n(?=#)", body):
        for paragraph in re.split(r"\n\s*\n", section):
            if not ON_A_DEVICE.search(paragraph) or "examples/profiles/" in paragraph:
                continue  # no device measured; a profile's figures: test_the_timing_model_page_s_profile_figures
            for item in re.split(r"\n(?=\s*- )", paragraph):
                cited = CITATION.findall(item) or CITATION.findall(paragraph) or CITATION.findall(section)
                for number, unit in FIGURE.findall(item):
                    if unit != "x" or "." in number:
                        yield f"{number} {unit}", cited, item


@pytest.mark.parametrize("page", ["README.md", *sorted(p.name for p in (ROOT / "docs").glob("*.md"))])
def test_every_figure_left_in_prose_is_in_the_results_it_cites(page):
    """A measured figure typed into prose (history, design notes) must be found in the committed
    result folder or file its item, paragraph or section cites: a figure with no source, or one
    whose source says otherwise, fails."""
    path = ROOT / page if page == "README.md" else ROOT / "docs" / page
    wrong = [(figure, cited, item[:100]) for figure, cited, item in prose_figures(path.read_text(encoding="utf-8"))
             if figure.split()[0].replace(",", "") not in "".join(map(_record_text, cited))]
    assert not wrong, wrong


def test_a_figure_its_cited_results_do_not_hold_is_found():
    page = ("# One\n\nOn the H200 the GEMM ran at 99.9 TFLOP/s (`results/gpu/2026-11-30-h200-gemm/`).\n\n"
            "# Two\n\nAn H100 gave 1.23x with no source.\n")
    found = {figure: cited for figure, cited, _ in prose_figures(page)}
    assert found == {"99.9 TFLOP/s": ["results/gpu/2026-11-30-h200-gemm/"], "1.23 x": []}
    assert "99.9" not in _record_text("results/gpu/2026-11-30-h200-gemm/")
