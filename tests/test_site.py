"""The documentation site (docs/, Sphinx): it builds with warnings as errors, from the repository.

The build renders the Markdown pages, the tutorials (sphinx-gallery; not executed here:
tests/test_tutorials.py runs them), the API reference from the docstrings, and the results'
charts drawn from the current result files (docs/site_results.py; tests/test_results_pages.py
checks the generated tables). A broken cross-reference between pages, a docstring Sphinx
cannot parse or a missing result file fails it.
"""

from __future__ import annotations

import html
import os
import re
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
    for page in ("index.html", "api.html", "gpu.html", "timing-model.html", "design.html",
                 "generated_tutorials/index.html"):
        assert (site / page).is_file(), page
    tutorials = sorted(p.name for p in (ROOT / "tutorials").glob("[0-9][0-9]_*.py"))
    assert tutorials and all((site / "generated_tutorials" / t.replace(".py", ".html")).is_file() for t in tutorials)


def test_the_api_reference_documents_the_public_calls(site):
    text = (site / "api.html").read_text(encoding="utf-8")
    for name in ("partition_report", "DeviceProfile", "OpFamily", "model_program", "build_tvm_only"):
        assert f'<span class="pre">{name}</span>' in text, name


def test_the_results_pages_show_the_current_figures_and_their_charts(site):
    sys.path.insert(0, str(ROOT / "docs"))
    import site_results

    text = (site / "gpu.html").read_text(encoding="utf-8")
    kernels = site_results.entry("kernels")
    for case, row in site_results.read(kernels["file"])["ops"].items():
        assert f"{row['median_us']:.1f} us" in text, case
    for row in site_results.read(site_results.entry("fp16_gemm")["file"])["rows"]:
        assert f"{row['ms'] * 1e3:.1f} us" in text, row["case"]
    pages = {"kernels": "gpu.html", "models": "gpu.html", "timing": "timing-model.html"}
    assert set(pages) == set(site_results.CHARTS)
    for block, (name, _) in site_results.CHARTS.items():
        assert f'src="_images/{name}"' in (site / pages[block]).read_text(encoding="utf-8"), name
        assert (site / "_images" / name).stat().st_size > 10_000, name


def test_the_front_page_opens_with_the_problem_the_commands_and_the_flow(site):
    article = (site / "index.html").read_text(encoding="utf-8").split("<article", 1)[1].split("</article>", 1)[0]
    article = re.sub(r'<img[^>]*src="_images/flow.svg"[^>]*>', "[the flow]", article)
    text = html.unescape(re.sub(r"<[^>]+>", "", article))
    places = [text.index(s) for s in ("through BYOC", "[the flow]", "pip install . && simaccel demo",
                                      'pip install ".[test,torch]" && pytest -n auto --dist loadfile', "Tutorials")]
    assert places == sorted(places), places
    assert (site / "_images" / "flow.svg").is_file()
