"""iree-stress report (issue #5): signatures ranked and named, correlation tops, HTML that a
browser renders, JUnit that validates."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TEST_CACHE, run_cli

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory: pytest.TempPathFactory,
               cpu_artifacts: dict[str, Path]) -> tuple[Path, dict[str, Any]]:
    """Faults at two steps, five times more likely at invoke than at upload (each step runs
    once per invocation, so the invoke signature must come out ~5x as frequent)."""
    run = tmp_path_factory.mktemp("report") / "run"
    res = run_cli("soak", "--target", "cpu", "--programs", "unary.*.f32.*", "--workers", "2",
                  "--duration", "30s", "--seed", "21", "--inject", "segv@invoke:0.005",
                  "--inject", "segv@upload:0.0015", "--json", "-q", "--results", str(run))
    assert res.rc == 1, res.stderr[-2000:]
    return run, res.json()


def test_report_ranks_the_two_injected_signatures_and_names_their_steps(
        faulty_run: tuple[Path, dict[str, Any]]) -> None:
    run, _ = faulty_run
    res = run_cli("report", str(run), "--format", "json")
    assert res.rc == 1
    rep = res.json()
    sigs = rep["signatures"]
    assert [s["last_step"] for s in sigs[:2]] == ["invoke", "upload"]
    assert sigs[0]["count"] > sigs[1]["count"] >= 1
    assert all(s["class"] == "crash" and s["signal"] == "SIGSEGV" for s in sigs[:2])
    assert sigs[0]["ci_low"] <= sigs[0]["rate_per_1k"] <= sigs[0]["ci_high"]
    by_id = {c["signature"]: c for c in rep["correlation"]}
    for s in sigs[:2]:
        corr = by_id[s["id"]]
        feats = corr["features"]
        if feats[0]["failure_windows"] >= 5:
            assert s["last_step"] in feats[0]["feature"], (s["id"], feats[:3])
            assert feats[0]["lift"] > 1.5
        else:  # the report says so, and a handful of windows cannot order rare features
            assert "anecdotal" in corr["note"]
            assert any(s["last_step"] in x["feature"] for x in feats[:3]), (s["id"], feats[:3])
    assert rep["healthy_windows"] >= 30  # the report flags fewer as too few


def test_soak_summary_lists_the_top_signatures(faulty_run: tuple[Path, dict[str, Any]]) -> None:
    _, summary = faulty_run
    sigs = summary["signatures"]
    assert sigs and {"id", "class", "count", "rate_per_1k", "ci_low", "ci_high", "last_step",
                     "patterns", "example"} <= set(sigs[0])
    assert sigs[0]["last_step"] == "invoke" and Path(sigs[0]["example"]).is_dir()


def test_text_and_markdown_reports_show_signatures_and_correlation(
        faulty_run: tuple[Path, dict[str, Any]]) -> None:
    run, summary = faulty_run
    text = run_cli("report", str(run)).stdout
    assert "Failure signatures" in text and "HAL steps before" in text
    assert summary["signatures"][0]["id"] in text
    md = run_cli("report", str(run), "--format", "markdown").stdout
    assert md.startswith("# iree-stress report") and "| feature | in failures |" in md


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (.ci/run installs it)")
def test_html_report_opens_in_a_headless_browser_and_shows_its_plots(
        faulty_run: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    run, _ = faulty_run
    out = tmp_path / "report.html"
    assert run_cli("report", str(run), "--format", "html", "-o", str(out)).rc == 1
    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: requests.append(r.url))
        page.goto(out.as_uri())
        plots = page.locator("svg.plot")
        assert plots.count() == 4
        for i in range(4):
            box = plots.nth(i).bounding_box()
            assert box and box["width"] > 300 and box["height"] > 150
        bars = page.locator("svg.plot rect.bar")
        heights = [float(bars.nth(i).get_attribute("height") or 0) for i in range(bars.count())]
        assert sum(h > 0 for h in heights) >= 5
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        browser.close()
    assert errors == []
    assert requests == [out.as_uri()]  # self-contained: nothing else is fetched


def junit_xsd() -> Path | None:
    """The Jenkins JUnit schema, as shipped in pytest's source distribution."""
    dest = TEST_CACHE / "junit-10.xsd"
    if dest.exists():
        return dest
    tmp = TEST_CACHE / "sdist"
    tmp.mkdir(parents=True, exist_ok=True)
    got = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                          ":all:", "pytest==8.3.4", "-d", str(tmp), "-q"],
                         capture_output=True, text=True, env={**os.environ})
    if got.returncode != 0:
        return None
    with tarfile.open(next(tmp.glob("pytest-*.tar.gz"))) as tar:
        member = tar.getmember("pytest-8.3.4/testing/example_scripts/junit-10.xsd")
        data = tar.extractfile(member)
        assert data is not None
        dest.write_bytes(data.read())
    return dest


def test_junit_output_validates_against_the_jenkins_junit_schema(
        faulty_run: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    import xmlschema

    xsd = junit_xsd()
    if xsd is None:
        pytest.skip("could not fetch the JUnit schema (pytest sdist) from the package index")
    run, summary = faulty_run
    out = tmp_path / "junit.xml"
    run_cli("report", str(run), "--junit", str(out))
    xmlschema.XMLSchema(str(xsd)).validate(str(out))
    root = ET.parse(out).getroot()
    cases = root.findall("./testsuite/testcase")
    errors = root.findall("./testsuite/testcase/error")
    assert len(cases) >= 10 and errors
    assert int(root.find("testsuite").get("errors")) == len(errors)  # type: ignore[union-attr]
    assert any(summary["signatures"][0]["id"] in (e.get("message") or "") for e in errors)
    assert all(c.get("classname", "").startswith("soak.") for c in cases)
    assert json.dumps(summary)  # the summary itself stays serialisable
