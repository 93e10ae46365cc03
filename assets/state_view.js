/* The snapshot page's selected state, chosen and drawn in the browser (fragviz.selectEvent, a clientside callback
   of fragviz/ui/pages/snapshot/state.py). A choice (a click on the timeline, ◀ ▶ or the arrow keys, a typed event,
   the device, Back) becomes the URL's query at once; the state after that event is drawn from the device's lives
   (assets/lives.js: fetched once where the trace is within the server's page_state_events) without asking the
   server, else from GET /api/snapshots/<id>/state. Until the lives have come, the first states come from the
   server too, so the page draws its first state without waiting for them.

   The page's source (a dcc.Store the layout fills) names the snapshot, each device's trace length and whether
   its lives may be fetched, the OOMs (their failed requests are marked on the histogram), the colours and the
   component ids. fragviz.stateView.drawn() says what is drawn now (for the tests and the benchmark); every draw
   also counts in fragviz.stateView.draws and fires "fv-state-drawn" on the document. */
window.fragviz = window.fragviz || {};
(function (fv) {
    "use strict";
    const MiB = 1048576;
    const kept = {key: null, lives: null};  // the lives of one device at a time: the page shows one
    let current = null;  // what is drawn: {source, view, state, sites, map, histogram, info}
    let latest = 0;  // the last draw asked for: a state that comes later than a newer choice is not drawn

    function triggered() {
        const t = window.dash_clientside.callback_context.triggered;
        const id = t && t.length ? String(t[0].prop_id).split(".")[0] : "";
        return id || null;
    }

    function whole(text) {
        return text != null && /^-?\d+$/.test(text) ? parseInt(text, 10) : null;
    }

    /* The view the URL's query names (fragviz.ui.pages.snapshot.view.view_of): device, event, trace length. */
    function viewOf(source, search) {
        const q = new URLSearchParams(search || "");
        const wanted = whole(q.get("device"));
        const device = wanted !== null && source.devices[wanted] ? wanted : source.opening;
        const n = source.devices[device].n;
        const event = whole(q.get("event"));
        return {device: device, n: n, event: event === null ? n : Math.min(Math.max(event, 0), n)};
    }

    function makeSearch(device, event) {
        return "?device=" + device + (event === undefined ? "" : "&event=" + event);
    }

    /* The event a choice selects, within the trace: a click on the timeline (by time, the point's own event),
       the previous or next event, a typed one; else the view's. */
    function chosenEvent(ids, trigger, click, typed, view, timed) {
        const clamp = (k) => Math.min(Math.max(Math.round(k), 0), view.n);
        if (trigger === ids.timeline && click && click.points && click.points.length) {
            const point = click.points[0];
            const chosen = timed ? point.customdata : point.x;
            if (chosen !== null && chosen !== undefined && isFinite(Number(chosen))) return clamp(Number(chosen));
        }
        if (trigger === ids.prev) return Math.max(0, view.event - 1);
        if (trigger === ids.next) return Math.min(view.n, view.event + 1);
        if (trigger === ids.event && typed !== null && typed !== undefined && typed !== "") return clamp(Number(typed));
        return view.event;
    }

    /* The device's lives where they have come; null while they are on their way or not asked for yet. */
    function livesOf(source, device) {
        return kept.key === source.sid + ":" + device ? kept.lives : null;
    }

    /* Ask for the device's lives (once the first state is drawn: they would slow it), where they may come. */
    function fetchLives(source, device) {
        const key = source.sid + ":" + device;
        if (kept.key === key) return;
        kept.key = key;
        kept.lives = null;
        if (!source.devices[device].lives) return;
        fetch("/api/snapshots/" + source.sid + "/devices/" + device + "/lives")
            .then((r) => (r.ok ? r.arrayBuffer() : null))
            .then((buffer) => { if (buffer && kept.key === key) kept.lives = fv.lives.decode(buffer); })
            .catch(() => {});  // the server's states serve instead
    }

    /* The server's state after `event` in the shape fragviz.lives.stateAt gives, with its sites. */
    function serverState(sid, device, event) {
        return fetch("/api/snapshots/" + sid + "/state?device=" + device + "&event=" + event)
            .then((r) => r.json().then((body) => {
                if (!r.ok) throw new Error(body.error || ("the server answered " + r.status));
                return body;
            }))
            .then((body) => ({sites: body.sites || {}, state: body.segments.map((s) => ({
                address: s.address, size: s.total_size, stream: s.stream, pool: s.pool, expandable: s.is_expandable,
                poolId: s.pool_id, stack: s.stack, blocks: s.blocks.map((b) => ({
                    address: b.address, size: b.size, requested: b.requested_size, state: b.state, stack: b.stack}))}))}));
    }

    /* The size the gaps are measured against: one typed in MiB, else the failed request of an OOM at the event. */
    function markOf(source, view, markMib) {
        if (markMib) return [Math.trunc(Number(markMib) * MiB), "size"];
        const oom = source.ooms.find((o) => o.device === view.device && Math.abs(o.event - view.event) <= 1);
        return oom ? [oom.requested, "failed request"] : [null, ""];
    }

    function show(source, view, markMib, every) {
        const token = ++latest;
        const ask = {source: source, view: view, markMib: markMib, every: every};
        const lives = livesOf(source, view.device);
        if (lives) {
            paint(ask, fv.lives.stateAt(lives, view.event), lives.sites);
            return;
        }
        serverState(source.sid, view.device, view.event)
            .then((got) => { if (token === latest) paint(ask, got.state, got.sites); })
            .catch((err) => { if (token === latest) failed(source, err); });
    }

    function boxes() {
        return {map: document.getElementById("segment-map"), gaps: document.getElementById("gap-histogram")};
    }

    function paint(ask, state, sites) {
        const b = boxes();
        if (!b.map || !b.gaps) return;
        if (current && current.ask.view.device !== ask.view.device) b.map.__fvSpan = null;  // a device starts whole
        const f = fv.lives.figures(state);
        const info = fv.lives.eventInfo(ask.view.event, ask.view.n, f);
        window.dash_clientside.set_props(ask.source.ids.info, {children: info});
        current = {ask: ask, state: state, figures: f, sites: sites, info: info};
        draw(b);
        listen(b.map, b.gaps);
        stateView.draws += 1;
        document.dispatchEvent(new CustomEvent("fv-state-drawn", {detail: {event: ask.view.event}}));
        after(ask, b.map);
    }

    /* The current state's map and histogram, drawn again (a new state, a zoom, a new width). */
    function draw(b) {
        const ask = current.ask, source = ask.source, colors = source.colors, f = current.figures;
        const [mark, markLabel] = markOf(source, ask.view, ask.markMib);
        current.map = fv.draw.segmentMap(b.map, current.state, {most: ask.every ? null : source.rows, colors: colors,
                                                                span: b.map.__fvSpan || null});
        current.histogram = fv.draw.gapHistogram(b.gaps, f.gaps, {largest: f.generalLargest, mark: mark,
                                                                  markLabel: markLabel, colors: colors});
    }

    /* What follows a state drawn, once the browser has shown it: the first state of a device lets the rest of
       the page be drawn (the usage views, the OOM verdicts, the sites at the peak: ids.stateDrawn) and the
       device's lives come; every state, its sites and icicle (ids.sitesTrigger), a moment later. */
    let sitesTimer = null;
    function after(ask, box) {
        const source = ask.source, device = ask.view.device, set = window.dash_clientside.set_props;
        const here = () => document.body.contains(box);  // not after the page was left
        window.clearTimeout(sitesTimer);
        sitesTimer = window.setTimeout(() => {
            if (here()) set(source.ids.sitesTrigger, {data: {device: device, event: ask.view.event, at: Date.now()}});
        }, 120);
        const key = source.sid + ":" + device;
        if (box.__fvFollowed === key) return;  // the box is the page's own: a page opened again starts over
        box.__fvFollowed = key;
        window.setTimeout(() => {
            if (!here()) return;
            set(source.ids.stateDrawn, {data: {sid: source.sid, device: device}});
            fetchLives(source, device);
        }, 0);
    }

    function failed(source, err) {
        window.dash_clientside.set_props(source.ids.info, {children: "The state could not be drawn: " + err.message});
    }

    /* The block under a point of the map's canvas, or null. */
    function blockAt(px, py) {
        const rows = current.map.rows, h = current.map.rowHeight;
        if (px < current.map.left || px > current.map.left + current.map.plotWidth) return null;
        const row = rows[Math.floor((py - 4) / h)];
        if (!row) return null;
        const hit = row.blocks.find((b) => px >= b.x0 && px < Math.max(b.x1, b.x0 + 1));
        return hit ? {seg: current.state[hit.segment], block: current.state[hit.segment].blocks[hit.block]} : null;
    }

    function tip() {
        let el = document.getElementById("fv-state-tip");
        if (!el) {
            el = document.createElement("div");
            el.id = "fv-state-tip";
            el.className = "fv-tip";
            document.body.appendChild(el);
        }
        return el;
    }

    function showTip(e, lines) {
        const el = tip();
        if (!lines) { el.style.display = "none"; return; }
        el.replaceChildren(...lines.map((l) => { const d = document.createElement("div"); d.textContent = l; return d; }));
        el.style.display = "block";
        const x = Math.min(e.clientX + 14, window.innerWidth - el.offsetWidth - 8);
        const y = e.clientY + 14 + el.offsetHeight > window.innerHeight ? e.clientY - el.offsetHeight - 10 : e.clientY + 14;
        el.style.left = Math.max(4, x) + "px";
        el.style.top = Math.max(4, y) + "px";
    }

    function local(e, canvas) {
        const r = canvas.getBoundingClientRect();
        return [e.clientX - r.left, e.clientY - r.top];
    }

    /* The tooltips, a click on a block (its stack in the panel beside), and a redraw when the page's width changes:
       set once on each box (a new snapshot page makes new boxes). */
    function listen(mapBox, gapBox) {
        if (mapBox.__fvListening) return;
        mapBox.__fvListening = gapBox.__fvListening = true;
        mapBox.addEventListener("mousemove", (e) => {
            if (!current || e.target !== current.map.canvas) { showTip(e, null); return; }
            const hit = blockAt(...local(e, current.map.canvas));
            showTip(e, hit && fv.draw.blockLines(hit.seg, hit.block, current.sites[hit.block.stack]));
            current.map.canvas.style.cursor = hit ? "pointer" : "";
        });
        mapBox.addEventListener("mouseleave", (e) => showTip(e, null));
        let dragged = false;
        zoomable(mapBox, () => { dragged = true; });
        mapBox.addEventListener("click", (e) => {
            if (dragged) { dragged = false; return; }  // the end of a drag, not a click on a block
            if (!current || e.target !== current.map.canvas) return;
            const hit = blockAt(...local(e, current.map.canvas));
            if (!hit) return;
            window.dash_clientside.set_props(current.ask.source.ids.blockClick, {data: {
                device: current.ask.view.device, event: current.ask.view.event, address: hit.block.address,
                clicked: Date.now()}});
        });
        gapBox.addEventListener("mousemove", (e) => {
            const canvas = current && current.histogram.canvas;
            if (!canvas || e.target !== canvas) { showTip(e, null); return; }
            const px = local(e, canvas)[0];
            const bucket = current.histogram.buckets.find((b) => px >= b.x0 && px < b.x1);
            showTip(e, bucket && [bucket.range + ": " + fv.lives.counted(bucket.gaps, "gap") + ", "
                                  + fv.lives.formatBytes(bucket.bytes)]);
        });
        gapBox.addEventListener("mouseleave", (e) => showTip(e, null));
        let width = mapBox.clientWidth, pending = false;
        new ResizeObserver(() => {
            if (pending || mapBox.clientWidth === width || !current) return;
            pending = true;
            window.requestAnimationFrame(() => {
                pending = false;
                width = mapBox.clientWidth;
                const b = boxes();
                if (current && b.map === mapBox) draw(b);
            });
        }).observe(mapBox);
    }

    /* A drag across the map's plot area zooms it to the offsets dragged over (kept for the next events, as
       Plotly kept a zoom); a double-click shows every offset again. `onDrag` hears that a drag happened (the
       click that ends it is no click on a block). */
    function zoomable(mapBox, onDrag) {
        let start = null;
        const band = document.createElement("div");
        band.className = "fv-map-zoombox";
        mapBox.appendChild(band);
        const inPlot = (px) => Math.min(Math.max(px, current.map.left), current.map.left + current.map.plotWidth);
        const offset = (px) => {
            const [lo, hi] = current.map.span;
            return lo + (inPlot(px) - current.map.left) / current.map.plotWidth * (hi - lo);
        };
        mapBox.addEventListener("mousedown", (e) => {
            if (e.button !== 0 || !current || e.target !== current.map.canvas) return;
            const px = local(e, current.map.canvas)[0];
            if (px < current.map.left) return;
            start = px;
            e.preventDefault();
        });
        document.addEventListener("mousemove", (e) => {
            if (start === null || !current) return;
            const canvas = current.map.canvas, px = inPlot(local(e, canvas)[0]);
            band.style.display = Math.abs(px - start) > 4 ? "block" : "none";
            band.style.left = canvas.offsetLeft + Math.min(px, start) + "px";
            band.style.top = canvas.offsetTop + "px";
            band.style.width = Math.abs(px - start) + "px";
            band.style.height = canvas.offsetHeight + "px";
        });
        document.addEventListener("mouseup", (e) => {
            if (start === null || !current) return;
            const px = inPlot(local(e, current.map.canvas)[0]), from = start;
            start = null;
            band.style.display = "none";
            if (Math.abs(px - from) <= 4) return;
            onDrag();
            const a = offset(Math.min(px, from)), b = offset(Math.max(px, from));
            if (b - a >= 1) zoomTo(mapBox, [a, b]);
        });
        mapBox.addEventListener("dblclick", (e) => {
            if (current && e.target === current.map.canvas) zoomTo(mapBox, null);
        });
    }

    function zoomTo(mapBox, span) {
        mapBox.__fvSpan = span;
        const b = boxes();
        if (current && b.map === mapBox) draw(b);
    }

    /* What is drawn now, as plain data: the event, the line of figures, the map's rows and blocks (in canvas
       pixels), its kinds, ticks and fold, the histogram's buckets, tick labels and mark. */
    function drawn() {
        if (!current) return null;
        const m = current.map, h = current.histogram;
        return {
            device: current.ask.view.device, event: current.ask.view.event, n: current.ask.view.n, info: current.info,
            rows: m.rows.map((r) => ({label: r.label, y0: r.y0, y1: r.y1, blocks: r.blocks.map((b) => {
                const block = current.state[b.segment].blocks[b.block];
                return {x0: b.x0, x1: b.x1, kinds: b.kinds, address: block.address, size: block.size,
                        state: block.state};
            })})),
            segments: current.state.length, folded: m.folded, kinds: m.kinds, unit: m.unit, ticks: m.ticks, top: m.top,
            span: m.span,
            left: m.left, plotWidth: m.plotWidth,
            histogram: {buckets: h.buckets.map((b) => ({range: b.range, gaps: b.gaps, bytes: b.bytes})),
                        labels: h.labels, markText: h.markText, width: h.width, height: h.height},
        };
    }

    const stateView = {drawn: drawn, draws: 0};
    fv.stateView = stateView;

    const ns = (window.dash_clientside = window.dash_clientside || {});
    ns.fragviz = Object.assign(ns.fragviz || {}, {
        // Inputs: the timeline's click, ◀, ▶, the typed event, the device, the marked size, the URL's query, the
        // fold; states: the timeline's axis and the page's source. Outputs: the URL's query, the event box,
        // the device picker, the selected event (the timeline's line, the usage views, the sites follow it).
        selectEvent: function (click, _prev, _next, typed, device, markMib, search, every, axis, source) {
            const none = window.dash_clientside.no_update;
            if (!source || !boxes().map) return [none, none, none, none];
            const ids = source.ids, trigger = triggered();
            let view = viewOf(source, search), wanted;
            if (trigger === ids.device && device !== null && device !== view.device && source.devices[device]) {
                wanted = makeSearch(device);  // another device opens at its end
                view = viewOf(source, wanted);
            } else {
                view.event = chosenEvent(ids, trigger, click, typed, view, axis === "time");
                wanted = makeSearch(view.device, view.event);
            }
            show(source, view, markMib, (every || []).indexOf("all") >= 0);
            // Only a choice made on the page goes into the URL: the URL itself (loaded, or reached by Back) is
            // never rewritten, or a URL without an event would gain one and Back would land on the same page.
            const navigated = trigger === null || trigger === ids.url;
            return [navigated || wanted === search ? none : wanted, typed === view.event ? none : view.event,
                    device === view.device ? none : view.device, view.event];
        },
    });
})(window.fragviz);
