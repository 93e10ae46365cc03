"""Dashboard benchmark: what a user feels, in headless Chromium against a real server, on several shapes of input.

For each file: the file in hand to its full timeline (dropped on the library page, which opens the snapshot
page once it is stored), the state view drawn after navigating to the snapshot page, later visits' timelines,
another event chosen (random and adjacent) until the segment map and the histogram are redrawn, a timeline
zoom refined, and the renderer's memory once the file is open and again after all of that (memory the
renderer took stays its own). For the large file, the upload's first picture too.

Targets (medians):
- real files of 5k-25k events: event change <= 50 ms, file to full timeline <= 1.5 s, state view <= 1 s,
  renderer memory <= 300 MiB;
- the 2,000,000-event file: event change <= 250 ms, later timeline visits <= 0.5 s, first picture <= 3 s,
  renderer memory <= 700 MiB.

    python bench/bench_dashboard.py [--events N] [--repeats R] [--file SNAPSHOT ...] [--no-large]

By default it measures the real snapshots of 5k-25k events in ../shared/real_snapshots (where present) and the
synthetic 2M-event file; --file names others instead. An event change is timed in the page, from the choice
(the event box set as typing it does, or the ▶ button clicked) to the end of the redraw of both canvases.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from contextlib import suppress

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import ROOT, benchmark_snapshot, mib, serve  # noqa: E402

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
REAL = os.path.join(ROOT, "..", "shared", "real_snapshots")
REAL_FILES = ("sqattn_segment_free.pickle", "ftcourse.pickle", "cs336kk_ctx128_fullstep.pickle",
              "hanmin_train_19k.pickle")
PLOT_READY = ("(id) => { const p = document.querySelector('#' + id + ' .js-plotly-plot');"
              " return !!(p && p._fullData && p._fullData.length > 0); }")
STATE_READY = "() => !!(window.fragviz && fragviz.stateView && fragviz.stateView.drawn())"
# In the page: make a choice, then wait for the state view's draw of event k; the milliseconds between
CHANGE = """async ([how, k]) => {
    const drawn = new Promise((done) => document.addEventListener('fv-state-drawn', function seen(e) {
        if (e.detail.event === k) { document.removeEventListener('fv-state-drawn', seen); done(); }
    }));
    const start = performance.now();
    if (how === 'next') document.getElementById('next-event').click();
    else window.dash_clientside.set_props('event', {value: k});
    await drawn;
    return performance.now() - start;
}"""
SMALL_TARGETS = {"change": 0.05, "timeline": 1.5, "state": 1.0, "memory": 300}
LARGE_TARGETS = {"change": 0.25, "visit": 0.5, "picture": 3.0, "memory": 700}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=2_000_000, help="events of the synthetic large file")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--file", action="append", help="measure this snapshot (repeatable) instead of the real ones")
    ap.add_argument("--no-large", action="store_true", help="skip the synthetic large file")
    args = ap.parse_args()
    files = args.file or [p for p in (os.path.join(REAL, f) for f in REAL_FILES) if os.path.exists(p)]
    print(f"load average at the start: {' '.join(f'{v:.2f}' for v in os.getloadavg())} "
          f"({os.cpu_count()} cores)")
    ok = True
    for path in files:
        ok &= report(path, measure(path, args.repeats, large=False), SMALL_TARGETS)
    if not args.no_large:
        path = benchmark_snapshot(args.events)
        ok &= report(path, measure(path, args.repeats, large=True), LARGE_TARGETS)
    print(f"load average at the end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0 if ok else 1


def measure(path: str, repeats: int, large: bool) -> dict:
    """Every figure of one file, each in a fresh store and a fresh browser."""
    from playwright.sync_api import sync_playwright

    work = tempfile.mkdtemp(prefix="fragviz-bench-")
    proc, url = serve(os.path.join(work, "store.sqlite"))
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            got = uploaded(page, url, path)
            sid = int(page.url.rsplit("/", 1)[-1].split("?")[0])
            page.wait_for_timeout(3000)  # the rest of the page settles, as before a person's next step
            got["memory_open"] = renderer_mib()
            got.update(visits(page, url, sid, repeats))
            n = page.evaluate("fragviz.stateView.drawn().n")
            rng = random.Random(2)
            got["random"] = [change(page, "set", rng.randrange(n + 1)) for _ in range(repeats * 3)]
            got["adjacent"] = adjacent(page, url, sid, n, repeats * 3)
            got["zoom"] = zooming(page, url, sid, repeats)
            got["memory"] = renderer_mib()
            got["events"] = n
            browser.close()
    finally:
        proc.terminate()
    return got


def uploaded(page, url: str, path: str) -> dict:
    """The file dropped on the library page: seconds until its first picture (the preview, or the page), until
    the snapshot page's state view and its full timeline are drawn."""
    page.goto(url + "/")
    page.wait_for_selector("#upload input[type=file]", state="attached")
    start = time.perf_counter()
    page.set_input_files("#upload input[type=file]", path)
    page.wait_for_function("() => document.querySelector('.fv-preview svg polyline') || "
                           "(window.fragviz && fragviz.stateView && fragviz.stateView.drawn())", timeout=900000)
    picture = time.perf_counter() - start
    page.wait_for_function(STATE_READY, timeout=900000)
    state = time.perf_counter() - start
    page.wait_for_function(PLOT_READY, arg="timeline", timeout=900000)
    return {"picture": picture, "upload_state": state, "timeline": time.perf_counter() - start}


def visits(page, url: str, sid: int, repeats: int) -> dict:
    """Later visits of the snapshot page, as a person makes them: from the library (loaded, settled), a click on
    the snapshot's link (the app's own navigation); seconds until the state view, until the timeline."""
    states, timelines = [], []
    for _ in range(repeats):
        page.goto(url + "/")
        page.wait_for_selector(f"#library-table a[href='/snapshots/{sid}']")
        page.wait_for_timeout(1500)
        start = time.perf_counter()
        page.click(f"#library-table a[href='/snapshots/{sid}']")
        page.wait_for_function(STATE_READY, timeout=120000)
        states.append(time.perf_counter() - start)
        page.wait_for_function(PLOT_READY, arg="timeline", timeout=120000)
        timelines.append(time.perf_counter() - start)
    page.wait_for_timeout(1500)
    return {"state": states, "visit": timelines}


def change(page, how: str, k: int) -> float:
    """Seconds from a choice of event k to its state drawn, measured in the page."""
    seconds = page.evaluate(CHANGE, [how, k]) / 1000
    page.wait_for_timeout(300)  # a person's pace: the sites and the usage lines follow before the next choice
    return seconds


def adjacent(page, url: str, sid: int, n: int, count: int) -> list[float]:
    start = max(0, n // 2 - count)
    page.goto(f"{url}/snapshots/{sid}?device={page.evaluate('fragviz.stateView.drawn().device')}&event={start}")
    page.wait_for_function(STATE_READY, timeout=120000)
    page.wait_for_timeout(1500)
    return [change(page, "next", start + i + 1) for i in range(min(count, n - start))]


SIGNATURE = ("(p => JSON.stringify(p._fullData.map(t => [t.x ? t.x.length : 0, t.x ? t.x[0] : null])))")


def zooming(page, url: str, sid: int, repeats: int) -> list[float]:
    """A drag across the timeline (a box zoom along x, as a person does) until its refined series is drawn."""
    rng = random.Random(3)
    times = []
    for _ in range(repeats):
        page.goto(f"{url}/snapshots/{sid}")
        page.wait_for_function(PLOT_READY, arg="timeline", timeout=120000)
        page.wait_for_timeout(1000)
        page.locator("#timeline").scroll_into_view_if_needed()
        page.evaluate(f"() => {{ window.__fvSig = ({SIGNATURE})(document.querySelector('#timeline .js-plotly-plot')); }}")
        box = page.locator("#timeline .nsewdrag").first.bounding_box()
        a = rng.uniform(0.05, 0.6)
        b = a + rng.choice((0.02, 0.1, 0.3))
        y = box["y"] + box["height"] / 2
        page.mouse.move(box["x"] + a * box["width"], y)
        page.mouse.down()
        page.mouse.move(box["x"] + b * box["width"], y + 2, steps=4)
        start = time.perf_counter()
        page.mouse.up()
        page.wait_for_function(f"({SIGNATURE})(document.querySelector('#timeline .js-plotly-plot')) !== window.__fvSig",
                               timeout=60000)
        times.append(time.perf_counter() - start)
    return times


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


def ours(pid: int) -> bool:
    """Whether `pid` descends from this process (its browser, not another one on the machine)."""
    with suppress(OSError, ValueError):
        while pid > 1:
            pid = parent_of(pid)
            if pid == os.getpid():
                return True
    return False


def renderer_mib() -> float:
    """The resident memory of the page's renderer process (the largest of this browser's renderers), in MiB."""
    sizes = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or not ours(int(pid)):
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read()  # chromium rewrites its arguments as one line: no NULs between them
            if b"chrom" not in cmd.split(b" ")[0] or b"--type=renderer" not in cmd:
                continue
            with open(f"/proc/{pid}/status") as fh:
                rss = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
            sizes.append(rss / 1024)
        except (OSError, StopIteration):
            continue
    return max(sizes, default=0.0)


def report(path: str, got: dict, targets: dict) -> bool:
    """Print one file's figures, each median against its target; whether all are met."""
    median = {k: statistics.median(v) for k, v in got.items() if isinstance(v, list) and v}
    p95 = {k: sorted(v)[min(len(v) - 1, int(0.95 * len(v)))] for k, v in got.items() if isinstance(v, list) and v}
    print(f"\n{os.path.basename(path)} ({mib(os.path.getsize(path))}, {got['events']:,} events on the device shown)")
    # (what, the figure measured once or the key of those measured many times, its target's key)
    rows = [("file dropped to first picture (s)", "picture", "picture"),
            ("file dropped to state view drawn (s)", "upload_state", None),
            ("file dropped to full timeline (s)", "timeline", "timeline"),
            ("later visit (from the library): state view drawn (s)", "state", "state"),
            ("later visit (from the library): timeline drawn (s)", "visit", "visit"),
            ("event change, random (s)", "random", "change"),
            ("event change, adjacent (s)", "adjacent", "change"),
            ("timeline zoom refined (s)", "zoom", None),
            ("renderer memory, file opened (MiB)", "memory_open", "memory"),
            ("renderer memory, after all of the above (MiB)", "memory", None)]
    ok = True
    for name, key, target in rows:
        value = median.get(key, got[key])
        extra = f"  (p95 {p95[key]:.3f})" if key in p95 else ""
        if target in targets:
            met = value <= targets[target]
            ok &= met
            extra += f"  target <= {targets[target]}: {'meets' if met else 'MISSES'}"
        print(f"  {name:<54} {value:9.3f}{extra}")
    return ok


if __name__ == "__main__":
    sys.exit(main())
