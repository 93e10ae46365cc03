/* The snapshot page's state drawn on canvases: the segment map (one row per segment, its blocks to scale and
   coloured by state, the size axis kept in sight above it) and the free-gap histogram. A redraw is a few
   milliseconds whatever the state holds, where a Plotly figure of thousands of bars took hundreds.

   fragviz.draw.segmentRows(state, most)         the rows drawn, in fragviz.ui.figures.segments.segment_rows's order
   fragviz.draw.segmentMap(box, state, options)  the map in `box` (#segment-map); returns what it drew
   fragviz.draw.gapHistogram(box, gaps, options) the histogram in `box` (#gap-histogram); returns what it drew

   What each returns (rows, blocks and their kinds, ticks and their boxes) is kept for the tooltips and clicks,
   and read by the browser tests through fragviz.stateView.drawn(). Every element the functions make lives in
   the box they are given, which Dash renders empty and leaves alone. */
window.fragviz = window.fragviz || {};
(function (fv) {
    "use strict";
    const FONT = "12px system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
    const MONO = "11px 'DejaVu Sans Mono', Menlo, Consolas, monospace";
    const INK = "#444444", GRID = "#EEEEEE", FREE = "#E8E8E8";
    const ROW = 22;  // px per segment row, the bar 3/4 of it
    const MOST_PIXELS = 30000;  // a canvas taller than about 32k px is not drawn by browsers: rows shrink to fit
    const STATE_TEXT = {active_allocated: "allocated", inactive: "free",
                        active_pending_free: "freed, waiting for stream work (active_pending_free):"};
    const KINDS = ["allocated", "rounding waste", "pending free", "free"];

    /* An element `tag` with class `cls` in `parent`, made once and found after. */
    function part(parent, tag, cls) {
        let el = parent.querySelector(":scope > ." + cls);
        if (!el) {
            el = document.createElement(tag);
            el.className = cls;
            parent.appendChild(el);
        }
        return el;
    }

    /* A canvas sized to w x h CSS pixels, sharp on high-density screens; its 2D context in CSS pixels. */
    function sized(canvas, w, h) {
        const ratio = window.devicePixelRatio || 1;
        if (canvas.width !== Math.round(w * ratio) || canvas.height !== Math.round(h * ratio)) {
            canvas.width = Math.round(w * ratio);
            canvas.height = Math.round(h * ratio);
            canvas.style.width = w + "px";
            canvas.style.height = h + "px";
        }
        const g = canvas.getContext("2d");
        g.setTransform(ratio, 0, 0, ratio, 0, 0);
        g.clearRect(0, 0, w, h);
        return g;
    }

    /* (scale, name) of the largest binary unit `bytes` reaches (fragviz.ui.figures.style.unit_for). */
    function unitFor(bytes) {
        for (const [scale, name] of [[1073741824, "GiB"], [1048576, "MiB"], [1024, "KiB"]]) {
            if (bytes >= scale) return [scale, name];
        }
        return [1, "B"];
    }

    /* Round ticks (1, 2 or 5 times a power of ten) from 0 to at least `top`, at most `most` steps
       (fragviz.ui.figures.style.round_ticks); whole numbers only where `whole`. */
    function roundTicks(top, most, whole) {
        if (!(top > 0)) return [0, 1];
        let magnitude = Math.pow(10, Math.floor(Math.log10(top / most)));
        if (whole) magnitude = Math.max(1, magnitude);
        const step = [1, 2, 5, 10, 20].map((m) => m * magnitude).find((s) => top / s <= most);
        const count = Math.ceil(top / step - 1e-9);
        const out = [];
        for (let i = 0; i <= count; i++) out.push(Math.round(i * step * 1e12) / 1e12);
        return out;
    }

    function tickText(v) {
        return String(Number(v.toPrecision(6)));
    }

    /* 2**e bytes, short (fragviz.ui.figures.gaps.pow2_label). */
    function pow2Label(e) {
        const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
        return e < 60 ? Math.pow(2, e % 10) + " " + units[Math.min(Math.floor(e / 10), units.length - 1)]
            : "2^" + e + " B";
    }

    /* Powers of two to tick between 2**lo and 2**hi, at most `most` (fragviz.ui.figures.gaps._pow2_ticks). */
    function pow2Ticks(lo, hi, most) {
        let ticks = [];
        for (const step of [1, 2, 5, 10, 20]) {
            ticks = [];
            for (let e = lo; e <= hi; e++) if (((e % step) + step) % step === 0) ticks.push(e);
            if (ticks.length <= most) return ticks;
        }
        return ticks;
    }

    function poolOf(seg) {
        return seg.poolId || [0, 0];
    }

    /* The rows drawn, top first: the `most` largest segments (all when null), grouped by pool (general first,
       then private pools; large before small) and stream, largest first. */
    function segmentRows(state, most) {
        let drawn = state.map((_, i) => i);
        if (most != null && state.length > most) {
            drawn = drawn.sort((a, b) => state[b].size - state[a].size || state[a].address - state[b].address)
                .slice(0, most);
        }
        return drawn.sort((a, b) => {
            const s = state[a], t = state[b], p = poolOf(s), q = poolOf(t);
            return p[0] - q[0] || p[1] - q[1] || (s.pool < t.pool ? -1 : s.pool > t.pool ? 1 : 0)
                || s.stream - t.stream || t.size - s.size || s.address - t.address;
        });
    }

    function privatePool(seg) {
        const p = poolOf(seg);
        return p[0] === 0 && p[1] === 0 ? "" : "pool (" + p[0] + ", " + p[1] + ")";
    }

    function hex(n) {
        return "0x" + n.toString(16);
    }

    /* A segment's row label (fragviz.ui.figures.segments._segment_label). */
    function segmentLabel(seg) {
        const stream = seg.stream === 0 ? "0" : (seg.stream % 65536).toString(16);
        const priv = privatePool(seg);
        return seg.pool + "·s" + stream + (priv ? "·" + priv : "") + " " + hex(seg.address);
    }

    /* The lines of a block's tooltip (fragviz.ui.figures.segments._block_text). */
    function blockLines(seg, b, site) {
        const fb = fv.lives.formatBytes;
        const lines = [STATE_TEXT[b.state] + " " + fb(b.size) + " at " + hex(b.address)];
        if (b.state !== "inactive") lines.push("requested " + fb(b.requested));
        const priv = privatePool(seg);
        lines.push("stream " + seg.stream + ", " + seg.pool + " pool" + (priv ? "; private " + priv
            + " (CUDA graph or MemPool): general requests cannot use it" : ""));
        if (site) lines.push(site);
        return lines;
    }

    /* The pieces of a block as drawn: [kind, start, length] in bytes from the segment's start. */
    function pieces(seg, b) {
        const at = b.address - seg.address;
        if (b.state === "inactive") return [["free", at, b.size]];
        if (b.state === "active_pending_free") return [["pending free", at, b.size]];
        const used = b.requested ? Math.min(b.requested, b.size) : b.size;
        const out = [["allocated", at, used]];
        if (b.size > used) out.push(["rounding waste", at + used, b.size - used]);
        return out;
    }

    function legend(box, colors, present) {
        const el = part(box, "div", "fv-map-legend");
        const hint = document.createElement("span");
        hint.className = "fv-hint fv-map-hint";
        hint.textContent = "drag across the map to zoom, double-click to see all";
        el.replaceChildren(...KINDS.filter((k) => present.has(k)).map((k) => {
            const item = document.createElement("span");
            item.className = "fv-legend-item";
            const swatch = document.createElement("i");
            swatch.style.background = colors[k];
            item.append(swatch, document.createTextNode(k));
            return item;
        }), hint);
        return el;
    }

    /* Round ticks between lo and hi (in the axis's unit), at most about `most`. */
    function spanTicks(lo, hi, most) {
        const steps = roundTicks(hi - lo, most, false);
        const step = steps.length > 1 ? steps[1] - steps[0] : 1;
        const out = [];
        for (let t = Math.ceil(lo / step - 1e-9) * step; t <= hi * (1 + 1e-9); t += step) {
            out.push(Math.round(t * 1e12) / 1e12);
        }
        return out;
    }

    /* The segment map of `state` in `box`. options: {most (rows before folding, null for all), colors, span
       (the offsets shown, [lo, hi] bytes; null for all: a drag zooms, see state_view.js)}. */
    function segmentMap(box, state, options) {
        const colors = options.colors;
        const order = segmentRows(state, options.most);
        const folded = state.length - order.length;
        const note = part(box, "p", "fv-map-note");
        note.textContent = folded ? folded + " smaller segments folded: showing the " + order.length
            + " largest of " + state.length : "";
        note.style.display = folded ? "" : "none";
        const legendBox = part(box, "div", "fv-map-legend");
        const axisCanvas = part(box, "canvas", "fv-map-axis");
        const mapCanvas = part(box, "canvas", "fv-map-rows");
        const width = Math.max(300, box.clientWidth);
        const labels = order.map((i) => segmentLabel(state[i]));
        const measure = sized(mapCanvas, 1, 1);
        measure.font = MONO;
        const left = 10 + Math.ceil(labels.reduce((m, l) => Math.max(m, measure.measureText(l).width), 0)) + 8;
        const right = 20;
        const plotW = Math.max(40, width - left - right);
        const rowH = order.length ? Math.max(2, Math.min(ROW, Math.floor(MOST_PIXELS / order.length))) : ROW;
        const height = Math.max(60, order.length * rowH + 8);
        const top = order.reduce((m, i) => Math.max(m, state[i].size), 0);
        const [lo, hi] = options.span || [0, top || 1];
        const [scale, unit] = unitFor(options.span ? hi - lo : top);
        const x = (bytes) => left + ((bytes - lo) / (hi - lo || 1)) * plotW;
        const g = sized(mapCanvas, width, height);
        const ticks = spanTicks(lo / scale, hi / scale, Math.max(2, Math.floor(plotW / 90)));
        g.strokeStyle = GRID;
        g.lineWidth = 1;
        for (const t of ticks) {
            const px = Math.round(x(t * scale)) + 0.5;
            g.beginPath(); g.moveTo(px, 0); g.lineTo(px, height); g.stroke();
        }
        const present = new Set();
        const rows = [];
        const barH = Math.max(1, Math.round(rowH * 0.75));
        g.font = MONO;
        g.textBaseline = "middle";
        g.textAlign = "right";
        if (rowH >= 10) {
            g.fillStyle = INK;
            labels.forEach((label, r) => g.fillText(label, left - 8, 4 + r * rowH + rowH / 2));
        }
        g.save();  // blocks only within the plot area (a zoom leaves some beyond it)
        g.beginPath();
        g.rect(left, 0, plotW, height);
        g.clip();
        order.forEach((si, r) => {
            const seg = state[si], y = 4 + r * rowH, mid = y + rowH / 2;
            const blocks = [];
            seg.blocks.forEach((b, bi) => {
                const x0 = x(b.address - seg.address), x1 = x(b.address - seg.address + b.size);
                for (const [kind, at, len] of pieces(seg, b)) {
                    present.add(kind);
                    g.fillStyle = colors[kind];
                    g.fillRect(x(at), mid - barH / 2, Math.max(0.5, x(at + len) - x(at)), barH);
                }
                if (x1 - x0 >= 3) {  // the white edge between blocks, where a block is wide enough to keep it
                    g.fillStyle = "#FFFFFF";
                    g.fillRect(x1 - 0.5, mid - barH / 2, 0.5, barH);
                }
                blocks.push({segment: si, block: bi, x0: x0, x1: x1, kinds: pieces(seg, b).map((p) => p[0])});
            });
            rows.push({label: labels[r], y0: y, y1: y + rowH, segment: si, blocks: blocks});
        });
        g.restore();
        legend(box, colors, present);
        drawSizeAxis(axisCanvas, width, left, plotW, ticks, unit, x, scale);
        return {rows: rows, folded: folded, left: left, plotWidth: plotW, rowHeight: rowH, kinds: [...present],
                unit: unit, top: top, span: [lo, hi], ticks: ticks.map(tickText), legend: legendBox, canvas: mapCanvas};
    }

    /* The size axis above the map (sticky: it stays in sight while the map scrolls under it). */
    function drawSizeAxis(canvas, width, left, plotW, ticks, unit, x, scale) {
        const g = sized(canvas, width, 40);
        g.fillStyle = "#FFFFFF";
        g.fillRect(0, 0, width, 40);
        g.font = FONT;
        g.fillStyle = INK;
        g.textAlign = "center";
        g.textBaseline = "top";
        g.fillText("offset in segment (" + unit + ")", left + plotW / 2, 2);
        g.textBaseline = "bottom";
        g.strokeStyle = INK;
        g.lineWidth = 1;
        g.beginPath(); g.moveTo(left, 39.5); g.lineTo(left + plotW, 39.5); g.stroke();
        for (const t of ticks) {
            const px = Math.round(x(t * scale)) + 0.5;
            g.beginPath(); g.moveTo(px, 34); g.lineTo(px, 40); g.stroke();
            g.fillText(tickText(t), px, 33);
        }
    }

    /* The free gaps by power-of-two size in `box`: how many (bars, left axis) and how many MiB (line, right
       axis), a size marked. options: {largest (the title's), mark, markLabel, colors}. */
    function gapHistogram(box, gaps, options) {
        const colors = options.colors, fb = fv.lives.formatBytes;
        const title = part(box, "div", "fv-gaps-title");
        title.textContent = "largest allocation that fits without a new segment: " + fb(options.largest);
        const keys = part(box, "div", "fv-gaps-legend");
        const canvas = part(box, "canvas", "fv-gaps-plot");
        const width = Math.max(300, box.clientWidth), height = 270;
        const m = {l: 56, r: 60, t: 12, b: 46};
        const plotW = width - m.l - m.r, plotH = height - m.t - m.b;
        const g = sized(canvas, width, height);
        const drawn = {buckets: [], labels: [], markText: "", width: width, height: height};
        const exps = gaps.map((s) => Math.floor(Math.log2(Math.max(s, 1))));
        const lo = exps.length ? Math.min(...exps) : 0, hi = exps.length ? Math.max(...exps) : 0;
        const counts = new Map(), volume = new Map();
        exps.forEach((e, i) => {
            counts.set(e, (counts.get(e) || 0) + 1);
            volume.set(e, (volume.get(e) || 0) + gaps[i]);
        });
        let markText = "";
        if (options.mark) {
            const where = Math.log2(Math.max(options.mark, 1));
            const inside = gaps.length > 0 && lo <= where && where <= hi + 1;
            markText = options.markLabel + " " + fb(options.mark) + (inside ? " (dashed line)" : ", beyond the gaps drawn");
            drawn.markAt = inside ? where : null;
        }
        keys.replaceChildren(...[[colors.gaps, "gaps", "fv-key-bar"], [colors.volume, "MiB in gaps", "fv-key-line"],
                                 [colors.mark, markText, "fv-key-mark"]].filter((k) => k[1]).map(([color, text, cls]) => {
            const item = document.createElement("span");
            item.className = "fv-legend-item " + cls;
            const swatch = document.createElement("i");
            swatch.style.background = color;
            item.append(swatch, document.createTextNode(text));
            if (cls === "fv-key-mark") item.style.color = color;
            return item;
        }));
        drawn.markText = markText;
        const countTicks = roundTicks(Math.max(1, ...counts.values()), 5, true);
        const volumeTicks = roundTicks(Math.max(0, ...volume.values()) / 1048576, 5, false);
        const yTop = countTicks[countTicks.length - 1] * 1.04, vTop = volumeTicks[volumeTicks.length - 1] * 1.04;
        const x = (e) => m.l + ((e - lo) / (hi + 1 - lo)) * plotW;
        const y = (c) => m.t + plotH - (c / yTop) * plotH;
        const v = (mib) => m.t + plotH - (mib / vTop) * plotH;
        g.font = FONT;
        g.lineWidth = 1;
        // grid and the left axis (gaps), the right axis (MiB)
        g.textBaseline = "middle";
        for (const t of countTicks) {
            g.strokeStyle = GRID;
            g.beginPath(); g.moveTo(m.l, Math.round(y(t)) + 0.5); g.lineTo(m.l + plotW, Math.round(y(t)) + 0.5); g.stroke();
            label(g, drawn, tickText(t), m.l - 6, y(t), "right");
        }
        if (gaps.length) for (const t of volumeTicks) label(g, drawn, tickText(t), m.l + plotW + 6, v(t), "left");
        axisTitle(g, "gaps", 14, m.t + plotH / 2);
        if (gaps.length) axisTitle(g, "MiB", width - 12, m.t + plotH / 2);
        g.strokeStyle = INK;
        g.beginPath(); g.moveTo(m.l, m.t + plotH + 0.5); g.lineTo(m.l + plotW, m.t + plotH + 0.5); g.stroke();
        g.textBaseline = "top";
        g.textAlign = "center";
        g.fillStyle = INK;
        g.fillText(gaps.length ? "free gap size" : "no free gap at this event", m.l + plotW / 2, height - 16);
        if (!gaps.length) return drawn;
        for (const e of pow2Ticks(lo, hi + 1, Math.max(2, Math.min(7, Math.floor(plotW / 60))))) {
            const px = Math.round(x(e)) + 0.5;
            g.strokeStyle = INK;
            g.beginPath(); g.moveTo(px, m.t + plotH); g.lineTo(px, m.t + plotH + 8); g.stroke();
            label(g, drawn, pow2Label(e), px, m.t + plotH + 16, "center");
        }
        const line = [];
        for (let e = lo; e <= hi; e++) {
            const count = counts.get(e) || 0, mib = (volume.get(e) || 0) / 1048576;
            const x0 = x(e + 0.05), x1 = x(e + 0.95);
            g.fillStyle = colors.gaps;
            if (count) g.fillRect(x0, y(count), x1 - x0, y(0) - y(count));
            line.push([x(e + 0.5), v(mib)]);
            drawn.buckets.push({range: fb(Math.pow(2, e)) + "–" + fb(Math.pow(2, e + 1)), gaps: count,
                                bytes: volume.get(e) || 0, x0: x0, x1: x1});
        }
        g.strokeStyle = colors.volume;
        g.fillStyle = colors.volume;
        g.lineWidth = 2;
        g.beginPath();
        line.forEach(([px, py], i) => (i ? g.lineTo(px, py) : g.moveTo(px, py)));
        g.stroke();
        for (const [px, py] of line) { g.beginPath(); g.arc(px, py, 3, 0, 2 * Math.PI); g.fill(); }
        if (drawn.markAt != null) {
            g.strokeStyle = colors.mark;
            g.setLineDash([6, 4]);
            g.beginPath(); g.moveTo(x(drawn.markAt), m.t); g.lineTo(x(drawn.markAt), m.t + plotH); g.stroke();
            g.setLineDash([]);
        }
        drawn.canvas = canvas;
        return drawn;
    }

    /* A tick label drawn at (px, py), its box kept (the tests check that no two overlap). */
    function label(g, drawn, text, px, py, align) {
        g.fillStyle = INK;
        g.textAlign = align;
        g.textBaseline = "middle";
        const w = g.measureText(text).width;
        const x0 = align === "right" ? px - w : align === "center" ? px - w / 2 : px;
        drawn.labels.push({text: text, x0: x0, x1: x0 + w, y0: py - 7, y1: py + 7});
        g.fillText(text, px, py);
    }

    function axisTitle(g, text, px, py) {
        g.save();
        g.translate(px, py);
        g.rotate(-Math.PI / 2);
        g.textAlign = "center";
        g.textBaseline = "middle";
        g.fillStyle = INK;
        g.fillText(text, 0, 0);
        g.restore();
    }

    fv.draw = {segmentRows, segmentMap, gapHistogram, blockLines, pow2Label, roundTicks, unitFor};
})(window.fragviz);
