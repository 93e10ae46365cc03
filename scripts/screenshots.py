"""The docs' screenshots of the snapshot page's views, taken from a real server in headless Chromium.

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots]

It ingests the bundled samples and, where ../shared/real_snapshots is beside the clone, a real training
snapshot (a full training step: parameters, activations, gradients, optimizer state) into a temporary store,
serves it, and writes snapshot.png (the page's top) and kinds.png (live memory by kind) of it,
allocations.png (the allocation bands with one band's hover) of the bundled gpt_train sample, library.png (the
library), of the bundled fragmentation OOM sample verdict.png (the OOM card and the free gaps at the OOM,
with the event line's fragmentation figure) and whatif.png (the run again with expandable segments), and
predict.png (the what-if page's "Predict a bigger run" card: the recordings of tests/data/predict at batch 8
and 4, predicted at batch 64 on a 2 GiB device).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import serve  # noqa: E402
REAL = os.path.join(os.path.dirname(ROOT), "shared", "real_snapshots", "cs336kk_ctx128_fullstep.pickle")
SAMPLE = os.path.join(ROOT, "sample_snapshots", "gpt_train.pickle.gz")
OOM_SAMPLE = os.path.join(ROOT, "sample_snapshots", "gpt_train_fragmentation_oom.pickle.gz")
PREDICT = [os.path.join(ROOT, "tests", "data", "predict", f"train_batch_{b}.pickle.gz") for b in (4, 8)]
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
BANDS_DRAWN = ("(() => { const p = document.querySelector('#allocation-bands .js-plotly-plot');"
               " return !!(p && p._fullLayout && p._fullLayout.meta && p._fullLayout.meta.bands); })()")
# The page position of the tallest band with a stack (its middle), from the figure's hover table (layout.meta)
LARGEST_BAND = """(() => {
    const p = document.querySelector('#allocation-bands .js-plotly-plot'), f = p._fullLayout, t = f.meta.bands;
    const b = p.getBoundingClientRect();
    let best = null, tallest = -1;
    for (let i = 0; i < t.x0.length; i++) {
        if (t.text[t.band[i]].includes('no stack recorded')) { continue; }
        const x0 = f.xaxis.l2p(t.x0[i]), x1 = f.xaxis.l2p(t.x1[i]), y0 = f.yaxis.l2p(t.y0[i]), y1 = f.yaxis.l2p(t.y1[i]);
        if (Math.abs(y1 - y0) > tallest) {
            tallest = Math.abs(y1 - y0);
            best = [b.left + f._size.l + (x0 + x1) / 2, b.top + f._size.t + (y0 + y1) / 2];
        }
    }
    return best;
})()"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "screenshots"))
    args = ap.parse_args()
    db = os.path.join(tempfile.mkdtemp(prefix="fragviz-shots-"), "store.sqlite")
    sources = [REAL, SAMPLE] if os.path.exists(REAL) else [SAMPLE, SAMPLE]  # ids 1 and 2 (or 1 twice)
    sources.append(OOM_SAMPLE)  # id 3 (or 2)
    sources += PREDICT  # looked up by name (_stored_id)
    subprocess.run([sys.executable, "-m", "fragviz.cli", "ingest", "--db", db, "--no-progress", *sources], cwd=ROOT,
                   check=True, stdout=subprocess.DEVNULL)
    from playwright.sync_api import sync_playwright

    proc, url = serve(db)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1360, "height": 1000})
            page.goto(f"{url}/snapshots/1")
            page.wait_for_function(BANDS_DRAWN, timeout=120000)
            page.wait_for_timeout(1500)
            page.screenshot(path=os.path.join(args.out, "snapshot.png"))
            page.locator("#memory-by-kind").screenshot(path=os.path.join(args.out, "kinds.png"))
            # the bands of the bundled sample: fewer, larger allocations, tall enough to point at
            page.goto(f"{url}/snapshots/{2 if os.path.exists(REAL) else 1}")
            page.wait_for_function(BANDS_DRAWN, timeout=120000)
            bands = page.locator("#allocation-bands")
            bands.scroll_into_view_if_needed()
            page.wait_for_timeout(1000)
            centre = page.evaluate(LARGEST_BAND)
            page.mouse.move(centre[0] - 2, centre[1])
            page.mouse.move(centre[0], centre[1])
            page.wait_for_timeout(800)
            box = bands.bounding_box()  # a clip of the page: an element's own screenshot would scroll first
            page.screenshot(path=os.path.join(args.out, "allocations.png"), clip=box)
            oom = 3 if os.path.exists(REAL) else 2
            _library(page, url, args.out)
            _verdict(page, url, oom, args.out)
            _whatif(page, url, oom, args.out)
            _predict(page, url, args.out)
            browser.close()
    finally:
        proc.terminate()
    print(f"wrote snapshot.png, kinds.png, allocations.png, library.png, verdict.png, whatif.png and predict.png "
          f"to {args.out}")
    return 0


def _library(page, url: str, out: str) -> None:
    page.set_viewport_size({"width": 1360, "height": 620})
    page.goto(url + "/")
    page.wait_for_selector("#library-table table")
    page.screenshot(path=os.path.join(out, "library.png"))


def _verdict(page, url: str, sid: int, out: str) -> None:
    """The OOM card and the free gaps at the OOM's state (the event line with its fragmentation is in
    snapshot.png's top)."""
    page.set_viewport_size({"width": 1360, "height": 1000})
    page.goto(f"{url}/snapshots/{sid}")
    link = page.locator("#oom-verdict a[href*='event=']").first
    link.wait_for(timeout=120000)
    link.click()
    page.wait_for_function("document.querySelector('#event-info') && "
                           "document.querySelector('#event-info').innerText.includes('fragmentation')", timeout=60000)
    page.wait_for_timeout(1500)
    card = page.locator("#oom-verdict").bounding_box()
    hist = page.locator("#gap-histogram").bounding_box()
    y0 = min(card["y"], hist["y"]) - 48  # the histogram card's title sits above the graph
    y1 = max(card["y"] + card["height"], hist["y"] + hist["height"]) + 8
    page.screenshot(path=os.path.join(out, "verdict.png"), full_page=True,
                    clip={"x": 0, "y": y0, "width": 1360, "height": min(1400, y1 - y0)})


def _whatif(page, url: str, sid: int, out: str) -> None:
    page.goto(f"{url}/whatif/{sid}")
    page.fill("#whatif-conf", "expandable_segments:True")
    page.fill("#whatif-memory", "")
    page.click("#whatif-run")
    page.wait_for_selector("#whatif-status table", timeout=300000)
    page.wait_for_function("(() => { const p = document.querySelector('#whatif-timeline .js-plotly-plot');"
                           " return !!(p && p.data && p.data.length); })()", timeout=120000)
    page.wait_for_timeout(1500)
    page.screenshot(path=os.path.join(out, "whatif.png"), full_page=True)


def _stored_id(url: str, path: str) -> int:
    """The id of the stored snapshot ingested from `path`, from the server's list."""
    with urllib.request.urlopen(url + "/api/snapshots", timeout=30) as r:
        rows = json.load(r)
    name = os.path.basename(path)
    return next(row["id"] for row in rows if row["name"].rsplit("/", 1)[-1] == name)


def _predict(page, url: str, out: str) -> None:
    """The what-if page's prediction card: the run at batch 8 and the one at batch 4 predict batch 64 on 2 GiB,
    under the recorded settings."""
    mid = _stored_id(url, PREDICT[1])
    page.set_viewport_size({"width": 1360, "height": 1000})
    page.goto(f"{url}/whatif/{mid}")
    page.wait_for_selector("#whatif-run")
    page.wait_for_selector("#whatif-timeline .main-svg")  # the empty figure drawn: the card below has moved down
    page.wait_for_timeout(1000)
    page.click("#whatif-predict-with")
    page.keyboard.type("train_batch_4")  # into the list's search box: the one option left
    page.click("[role=option]:has-text('train_batch_4')")
    page.keyboard.press("Escape")
    page.fill("#whatif-conf", "")  # the recorded settings
    page.fill("#whatif-memory", "2GiB")
    page.fill("#whatif-predict-sizes", "8 4")
    page.fill("#whatif-predict-knob", "batch")
    page.fill("#whatif-predict-to", "64")
    page.click("#whatif-predict-run")
    page.wait_for_selector("#whatif-predict-result .fv-predict-figures, #whatif-predict-result .fv-error",
                           timeout=300000)
    if page.locator("#whatif-predict-result .fv-error").count():
        raise SystemExit("the prediction was refused: " + page.locator("#whatif-predict-result").inner_text())
    page.wait_for_function("(() => { const p = document.querySelector('#whatif-predict-figure .js-plotly-plot');"
                           " return !!(p && p._fullData && p._fullData.length); })()", timeout=120000)
    page.wait_for_timeout(1500)
    page.locator("section.fv-predict").screenshot(path=os.path.join(out, "predict.png"))


if __name__ == "__main__":
    sys.exit(main())
