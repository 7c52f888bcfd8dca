"""iree-stress report (issues 5 and 9): real soaks with real faults; one signature per failure
mode across workers, threads and library versions; correlation that finds another thread's
step; the answer first in every format; HTML that a browser renders, JUnit that validates."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, run_cli

pytestmark = pytest.mark.system

JUNIT_XSD = REPO / "tests" / "data" / "junit-10.xsd"  # Jenkins' schema, from pytest's sources
PROGRAMS = "unary.*.f32.*"


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory: pytest.TempPathFactory,
               cpu_artifacts: dict[str, Path]) -> tuple[Path, dict[str, Any]]:
    """Faults at two steps, three times more likely at invoke than at upload (each step runs
    once per invocation, so the invoke signature must come out ~3x as frequent). The rates
    are high enough for ~25 crashed jobs in 30 s on 2 cores: with fewer (CI once saw the
    order flip at 0.005 / 0.0015) a Poisson draw can put upload first or leave it out."""
    run = tmp_path_factory.mktemp("report") / "run"
    res = run_cli("soak", "--target", "cpu", "--programs", PROGRAMS, "--workers", "2",
                  "--duration", "30s", "--seed", "21", "--inject", "segv@invoke:0.012",
                  "--inject", "segv@upload:0.004", "--max-worker-restarts", "1000", "--json",
                  "-q", "--results", str(run))
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
    rate = sigs[0]["rate"]
    assert rate["unit"] == "job" and rate["ci_low"] <= rate["rate"] <= rate["ci_high"]
    assert [f["id"] for f in rep["first_screen"]] == [s["id"] for s in sigs[:6]]
    by_id = {c["signature"]: c for c in rep["correlation"]}
    for s in sigs[:2]:
        corr = by_id[s["id"]]
        assert corr["aligned_at"] == f"begin:{s['last_step']}"
        # the key is not restated: nothing at or after the failing step of the failing thread
        assert not any("fail:" in x["feature"] or x["feature"].endswith(f"begin:{s['last_step']}")
                       and x["feature"].startswith("this thread just before")
                       for x in corr["features"])
        assert corr["verdict"].startswith(("nothing stands out", "stands out", "cannot tell"))
    assert rep["healthy_windows"] >= 30


def test_soak_summary_lists_the_top_signatures(faulty_run: tuple[Path, dict[str, Any]]) -> None:
    _, summary = faulty_run
    sigs = summary["signatures"]
    assert sigs and {"id", "class", "count", "rate_per_exposure", "ci_low", "ci_high",
                     "exposure", "last_step", "frames", "patterns", "example"} <= set(sigs[0])
    assert sigs[0]["last_step"] == "invoke" and Path(sigs[0]["example"]).is_dir()


def test_text_and_markdown_reports_answer_first(faulty_run: tuple[Path, dict[str, Any]]) -> None:
    run, summary = faulty_run
    text = run_cli("report", str(run)).stdout
    # what was tested (the header, issue 28), then the answer before anything else
    assert text.startswith("iree-stress: ") and "\n\nANSWER\n\n" in text
    assert text.index("rerun: iree-stress soak") < text.index("ANSWER") < \
        text.index("Failure signatures")
    assert "HAL steps before" in text
    assert summary["signatures"][0]["id"] in text.split("Failure signatures")[0]
    md = run_cli("report", str(run), "--format", "markdown").stdout
    assert md.startswith("# iree-stress report\n\n```text\niree-stress: ")
    assert "```\n\n## Answer" in md and "| feature | in failures |" in md


def test_a_known_signature_is_shown_apart_and_does_not_fail_the_report(
        faulty_run: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    run, summary = faulty_run
    known = tmp_path / "known.toml"
    ids = [s["id"] for s in summary["signatures"]]
    known.write_text("".join(f'[[known]]\nsignature = "{i}"\nnote = "seen before"\n'
                             for i in ids))
    res = run_cli("report", str(run), "--known", str(known), "--format", "json")
    assert res.rc == 0
    rep = res.json()
    assert rep["new_signatures"] == [] and rep["known_signatures"][:len(ids)] == ids
    assert all(f["status"] == "known" for f in rep["first_screen"])


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _open(html_file: Path, errors: list[str], requests: list[str]) -> Any:
    """(playwright, browser, page) with html_file loaded; console errors and every request
    recorded."""
    from playwright.sync_api import sync_playwright

    p = sync_playwright().start()
    browser = p.chromium.launch(executable_path=CHROMIUM, args=[
        "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(html_file.as_uri())
    return p, browser, page


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (.ci/run installs it)")
def test_html_report_opens_in_a_headless_browser_and_shows_its_plots(
        faulty_run: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """Also issue 28 item 9: the header says what was tested, plots name their axes with
    units, the rate over time is a share of jobs with intervals, evidence folders are links,
    q / lift / design effect are explained where they appear."""
    run, _ = faulty_run
    out = tmp_path / "report.html"
    assert run_cli("report", str(run), "--format", "html", "-o", str(out)).rc == 1
    errors: list[str] = []
    requests: list[str] = []
    p, browser, page = _open(out, errors, requests)
    try:
        assert page.locator("#answer li").count() >= 2
        assert "rerun: iree-stress soak" in page.locator("#header").inner_text()
        plots = page.locator("svg.plot")
        assert plots.count() == 4
        for i in range(4):
            box = plots.nth(i).bounding_box()
            assert box and box["width"] > 300 and box["height"] > 150
            for axis in ("y", "x"):
                label = plots.nth(i).locator(f"text.axis.{axis}")
                assert label.count() == 1 and (label.text_content() or "").strip()
                assert (label.bounding_box() or {}).get("width", 0) > 10  # drawn, readable
        bars = page.locator("svg.plot rect.bar")
        heights = [float(bars.nth(i).get_attribute("height") or 0) for i in range(bars.count())]
        assert sum(h > 0 for h in heights) >= 5
        over_time = page.locator('svg.plot[aria-label^="Failing jobs over time"]')
        assert "% of jobs failing" in (over_time.text_content() or "")
        tips = over_time.locator("rect.bar title").all_text_contents()
        assert tips and all(0 <= float(t.split(": ")[1].split("%")[0]) <= 100 for t in tips)
        assert over_time.locator("line.ci").count() == len(tips)
        link = page.locator("#answer a[href^='file://']").first
        assert Path(link.inner_text()).is_dir()
        assert link.get_attribute("href") == Path(link.inner_text()).as_uri()
        assert page.locator("th[title]", has_text="95% CI").count() >= 1
        assert page.locator("dl.legend dt", has_text="design effect").is_visible()
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    finally:
        browser.close()
        p.stop()
    assert errors == []
    assert requests == [out.as_uri()]  # self-contained: nothing else is fetched


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (.ci/run installs it)")
def test_known_failures_are_drawn_muted_on_the_gpu_time_line(tmp_path: Path) -> None:
    """A recorded GPU time line (tests/data/telemetry) with a hang a known-failures file
    names: its tick is grey, not the red of a new failure (the H200 plot was red end to end
    with known cuda context errors)."""
    from stress.analysis import html, report
    from tests.helpers.runs import store_run

    run = tmp_path / "run"
    run.mkdir()
    store_run(run, "timeline-stuck.json")
    hang = next(s for s in report.build([run]).signatures if s.cls == "hang")
    known = tmp_path / "known.toml"
    known.write_text(f'[[known]]\nsignature = "{hang.id}"\nnote = "seen before"\n')
    colours = {}
    for name, files in (("new", []), ("known", [known])):
        out = tmp_path / f"{name}.html"
        out.write_text(html.render(report.build([run], files)))
        errors: list[str] = []
        p, browser, page = _open(out, errors, [])
        try:
            tick = page.locator("svg.timeline line.fail")
            assert tick.count() == 1 and tick.first.get_attribute("class") == f"fail {name}"
            colours[name] = tick.first.evaluate("e => getComputedStyle(e).stroke")
        finally:
            browser.close()
            p.stop()
        assert errors == []
    assert colours == {"new": "rgb(204, 34, 34)", "known": "rgb(184, 184, 184)"}


def test_junit_output_validates_against_the_jenkins_junit_schema(
        faulty_run: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    import xmlschema

    run, summary = faulty_run
    out = tmp_path / "junit.xml"
    run_cli("report", str(run), "--junit", str(out))
    xmlschema.XMLSchema(str(JUNIT_XSD)).validate(str(out))
    root = ET.parse(out).getroot()
    cases = root.findall("./testsuite/testcase")
    errors = root.findall("./testsuite/testcase/error")
    assert len(cases) >= 10 and errors
    assert int(root.find("testsuite").get("errors")) == len(errors)  # type: ignore[union-attr]
    assert any(summary["signatures"][0]["id"] in (e.get("message") or "") for e in errors)
    assert all(c.get("classname", "").startswith("soak.") for c in cases)
    assert json.dumps(summary)  # the summary itself stays serialisable


# --- issue 9's done-when, with the runtime fault library (tests/native/libfault.c) ------------

def _fault_soak(run: Path, lib: Path, mode: str, prob: str, seed: int,
                *extra: str) -> dict[str, Any]:
    res = run_cli("soak", "--target", "cpu", "--programs", PROGRAMS, "--workers", "3",
                  "--threads", "2", "--duration", "8s", "--timeout", "2s",
                  "--teardown-timeout", "2s", "--seed", str(seed), "--env",
                  f"LD_PRELOAD={lib}", "--env", f"IREE_FAULT_JOIN={mode}", "--env",
                  f"IREE_FAULT_JOIN_PROB={prob}", "-q", "--json", "--results", str(run),
                  *extra, timeout=300)
    assert res.rc == 1, (res.rc, res.stderr[-2000:])
    rep = run_cli("report", str(run), "--format", "json")
    assert rep.rc == 1, rep.stderr[-2000:]
    return rep.json()  # type: ignore[no-any-return]


@pytest.mark.slow
def test_a_join_fault_gives_one_signature_per_mode_across_workers_threads_and_versions(
        tmp_path: Path, fault_lib: Path, cpu_artifacts: dict[str, Path]) -> None:
    """3 workers x 2 threads; the runtime's pthread_join crashes (or blocks) while a device is
    released. Before: 8 crashes gave 4 signatures, 4 stalls 3."""
    v1, v2 = fault_lib, fault_lib.with_name("libfault.so.2")
    crash1 = _fault_soak(tmp_path / "segv1", v1, "segv", "0.2", 1)
    crash2 = _fault_soak(tmp_path / "segv2", v2, "segv", "0.2", 2)
    stall = _fault_soak(tmp_path / "block", v1, "block", "0.05", 3)
    ids = []
    for rep, cls, frame in ((crash1, "crash", "iree_fault_segv"),
                            (crash2, "crash", "iree_fault_segv"),
                            (stall, "teardown_hang", "iree_fault_block")):
        mine = [s for s in rep["signatures"] if s["class"] == cls]
        assert len(mine) == 1, [s["description"] for s in rep["signatures"]]
        s = mine[0]
        assert s["frames"][0] == frame and "pthread_join" in s["frames"]
        assert s["count"] >= 2 and len(s["steps"]) >= 1
        ids.append(s["id"])
    assert ids[0] == ids[1]  # libfault.so.1 and libfault.so.2: the same id
    assert [s for s in stall["signatures"] if s["class"] == "teardown_hang"][0][
        "thread_state"] == "blocked"


@pytest.mark.slow
def test_a_fault_only_while_another_thread_creates_a_device_tops_the_correlation(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    run = tmp_path / "run"
    # 120 s: over 60 s a loaded machine gave 8 failure windows against 162 healthy, too few
    # for the feature to stand out after the false-discovery correction (a quiet one 11/286)
    res = run_cli("soak", "--target", "cpu", "--patterns", "churn", "--programs", PROGRAMS,
                  "--workers", "2", "--threads", "4", "--duration", "120s", "--seed", "4",
                  "--inject", "segv@device-release:1?while=device-create", "-q", "--json",
                  "--results", str(run), timeout=600)
    assert res.rc == 1, res.stderr[-2000:]
    rep = run_cli("report", str(run), "--format", "json").json()
    sig = rep["signatures"][0]
    corr = next(c for c in rep["correlation"] if c["signature"] == sig["id"])
    assert corr["features"][0]["feature"] == "other thread in flight: device-create", corr
    assert corr["features"][0]["stands_out"], corr


@pytest.mark.slow
def test_a_fault_independent_of_other_threads_mostly_gets_nothing_stands_out(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    """At a 5% false-discovery rate a run says "stands out" by chance about once in 20: 2 of 3
    seeded runs quiet keeps this test from flaking (the 9-of-10 check over synthetic windows
    is in tests/unit/test_analysis_correlation.py)."""
    quiet = 0
    for seed in (1, 2, 3):
        run = tmp_path / f"run{seed}"
        res = run_cli("soak", "--target", "cpu", "--patterns", "churn,per-call", "--programs",
                      PROGRAMS, "--workers", "2", "--threads", "3", "--duration", "15s",
                      "--seed", str(seed), "--inject", "segv@device-release:0.01", "-q",
                      "--json", "--results", str(run), timeout=300)
        assert res.rc == 1, res.stderr[-2000:]
        rep = run_cli("report", str(run), "--format", "json").json()
        corr = rep["correlation"][0]
        quiet += corr["verdict"].startswith("nothing stands out")
    assert quiet >= 2
