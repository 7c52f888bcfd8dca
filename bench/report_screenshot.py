"""A screenshot of an HTML report in headless Chromium (docs/img/report-html.png is made by
bench/reports_example.sh with this):

    python bench/report_screenshot.py REPORT.html OUT.png [--height PX]

Needs playwright (a dev dependency) and Debian's chromium; the page is taken as a browser
shows it, 1200 px wide, the top --height pixels (the header, the answer and the plots)."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("report", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--height", type=int, default=1900)
    args = ap.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("no chromium on PATH (apt-get install chromium)", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page(viewport={"width": 1200, "height": args.height})
        page.goto(args.report.resolve().as_uri())
        page.screenshot(path=str(args.out), full_page=False)
        browser.close()
    print(f"{args.out}: {args.report} at 1200x{args.height}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
