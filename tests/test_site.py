"""The documentation site (docs/, Sphinx): it builds with warnings as errors, from the repository.

The build renders the Markdown pages, the tutorials (sphinx-gallery; not executed here:
tests/test_tutorials.py runs them), the API reference from the docstrings and the results
page from the committed result files. A broken cross-reference between pages, a docstring
Sphinx cannot parse or a missing result file fails it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("sphinx", reason="the site needs the docs tools: pip install '.[test]'")
pytest.importorskip("sphinx_gallery", reason="the site needs sphinx-gallery: pip install '.[test]'")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built from a copy of docs/ (the build writes generated pages into its source)."""
    out = tmp_path_factory.mktemp("site")
    source = out / "docs"
    shutil.copytree(ROOT / "docs", source, ignore=shutil.ignore_patterns("_build", "generated_*", "__pycache__"))
    build = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-D", "plot_gallery=0",
                            "-d", str(out / ".doctrees"), str(source), str(out / "html")],
                           capture_output=True, text=True, timeout=600, cwd=out,
                           env={**os.environ, "SIMACCEL_REPO": str(ROOT)})
    assert build.returncode == 0, build.stdout + build.stderr
    return out / "html"


def test_the_site_builds_without_warnings_and_has_every_part(site):
    for page in ("index.html", "api.html", "generated_results.html", "timing-model.html", "design.html",
                 "generated_tutorials/index.html"):
        assert (site / page).is_file(), page
    tutorials = sorted(p.name for p in (ROOT / "tutorials").glob("[0-9][0-9]_*.py"))
    assert tutorials and all((site / "generated_tutorials" / t.replace(".py", ".html")).is_file() for t in tutorials)


def test_the_api_reference_documents_the_public_calls(site):
    text = (site / "api.html").read_text(encoding="utf-8")
    for name in ("partition_report", "DeviceProfile", "OpFamily", "model_program", "build_tvm_only"):
        assert f'<span class="pre">{name}</span>' in text, name


def test_the_results_page_shows_the_committed_figures(site):
    text = (site / "generated_results.html").read_text(encoding="utf-8")
    ops = json.loads((ROOT / "results/gpu/2026-12-03-h200-fp16-gemm/tests-ops/ops.json").read_text())["ops"]
    for case, row in ops.items():
        assert f"{row['median_us']:.1f} us" in text, case
    gemm = json.loads((ROOT / "results/gpu/2026-12-03-h200-fp16-gemm/final/fp16_gemm.json").read_text())["rows"]
    assert all(f"{row['ms'] * 1e3:.1f} us" in text for row in gemm)
