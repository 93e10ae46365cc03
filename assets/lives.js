/* The page's own states. A device's lives (GET /api/snapshots/<id>/devices/<d>/lives, see fragviz/ui/http/lives_api.py)
   hold every segment and block with the states it is part of; the state after event k is the rows whose span
   [first, end) holds k, so any event's state is rebuilt here without asking the server.

   fragviz.lives.decode(buffer)     the answer's columns as typed arrays, rows in address order
   fragviz.lives.stateAt(lives, k)  the segments after k events, free gaps included, as /api/.../state gives them
   fragviz.lives.figures(state)     the figures fragviz.model.metrics gives of those segments
   fragviz.lives.eventInfo(...)     the line above the segment map, as the server writes it */
window.fragviz = window.fragviz || {};
(function (fv) {
    "use strict";
    const MAGIC = "FVLIVES1";
    const BLOCK_STATES = ["active_allocated", "active_pending_free", "inactive"];
    const POOLS = ["small", "large"];
    const MiB = 1048576;

    function decode(buffer) {
        const bytes = new Uint8Array(buffer);
        if (bytes.length < 12 || String.fromCharCode(...bytes.subarray(0, 8)) !== MAGIC) {
            throw new Error("not a lives answer");
        }
        const length = new DataView(buffer).getUint32(8, true);
        const header = JSON.parse(new TextDecoder().decode(bytes.subarray(12, 12 + length)));
        const base = 12 + length;
        const tables = {segments: {}, blocks: {}};
        for (const [table, name, dtype, offset] of header.columns) {
            const Typed = dtype === "f8" ? Float64Array : Int32Array;
            tables[table][name] = new Typed(buffer, base + offset, header[table]);
        }
        return {
            device: header.device, states: header.states, sites: header.sites || {},
            segments: tables.segments, blocks: tables.blocks,
            segmentOrder: byAddress(tables.segments.address), blockOrder: byAddress(tables.blocks.address),
        };
    }

    function byAddress(address) {
        const order = new Uint32Array(address.length);
        for (let i = 0; i < order.length; i++) order[i] = i;
        return order.sort((a, b) => address[a] - address[b] || a - b);
    }

    function stateAt(lives, k) {
        const S = lives.segments, B = lives.blocks;
        const rows = [];
        for (const r of lives.blockOrder) if (B.first[r] <= k && k < B.end[r]) rows.push(r);
        const out = [];
        let j = 0;
        for (const r of lives.segmentOrder) {
            if (!(S.first[r] <= k && k < S.end[r])) continue;
            const lo = S.address[r], hi = lo + S.size[r];
            while (j < rows.length && B.address[rows[j]] < lo) j++;
            const blocks = [];
            let listsFree = false;
            for (; j < rows.length && B.address[rows[j]] < hi; j++) {
                const b = rows[j];
                listsFree = listsFree || B.state[b] === 2;
                blocks.push({address: B.address[b], size: B.size[b], requested: B.requested[b],
                             state: BLOCK_STATES[B.state[b]], stack: B.stack[b]});
            }
            out.push({address: lo, size: S.size[r], stream: S.stream[r], pool: POOLS[S.pool[r]],
                      expandable: S.expandable[r] < 0 ? null : S.expandable[r] === 1,
                      poolId: S.pool_a[r] < 0 ? null : [S.pool_a[r], S.pool_b[r]], stack: S.stack[r],
                      blocks: listsFree ? blocks : withGaps(lo, hi, blocks)});
        }
        return out;
    }

    /* A replayed segment's blocks with the free gaps between them (the last state lists its own). */
    function withGaps(lo, hi, active) {
        const out = [];
        let cursor = lo;
        for (const b of active) {
            if (b.address > cursor) out.push(gap(cursor, b.address - cursor));
            out.push(b);
            cursor = b.address + b.size;
        }
        if (hi > cursor) out.push(gap(cursor, hi - cursor));
        return out;
    }

    function gap(address, size) {
        return {address: address, size: size, requested: 0, state: "inactive", stack: -1};
    }

    function mod(a, b) {
        return ((a % b) + b) % b;
    }

    /* Free bytes of [lo, hi) in an expandable segment that releasing cannot unmap: its partial pages. */
    function stuckInGap(lo, hi, base, page) {
        const first = lo + mod(-(lo - base), page);
        const last = hi - mod(hi - base, page);
        return hi - lo - Math.max(0, last - first);
    }

    function segmentNonReleasable(seg) {
        const free = seg.blocks.filter((b) => b.state === "inactive");
        if (seg.expandable) {
            const page = seg.pool === "small" ? 2 * MiB : 20 * MiB;
            return free.reduce((sum, b) => sum + stuckInGap(b.address, b.address + b.size, seg.address, page), 0);
        }
        if (free.length === seg.blocks.length) return 0;
        return free.reduce((sum, b) => sum + b.size, 0);
    }

    function fragmentation(nonReleasable, reserved) {
        return reserved <= 0 ? 0 : Math.min(1, Math.max(0, nonReleasable / reserved));
    }

    /* state_figures, with the pools and the pending frees (fragviz.model.metrics). */
    function figures(state) {
        const f = totals(state);
        f.pools = pools(state);
        const general = f.pools.find((p) => !p.isPrivate);
        f.generalLargest = general ? general.largest : 0;
        f.gaps = [];
        f.pending = {bytes: 0, blocks: 0};
        for (const seg of state) {
            for (const b of seg.blocks) {
                if (b.state === "inactive") f.gaps.push(b.size);
                if (b.state === "active_pending_free") { f.pending.bytes += b.size; f.pending.blocks += 1; }
            }
        }
        return f;
    }

    function totals(segments) {
        const f = {reserved: 0, allocated: 0, requested: 0, free: 0, freeBlocks: 0, largest: 0,
                   segments: segments.length, blocks: 0, allocations: 0, nonReleasable: 0};
        for (const seg of segments) {
            f.reserved += seg.size;
            f.nonReleasable += segmentNonReleasable(seg);
            for (const b of seg.blocks) {
                f.blocks += 1;
                if (b.state === "inactive") {
                    f.free += b.size; f.freeBlocks += 1; f.largest = Math.max(f.largest, b.size);
                } else {
                    f.allocations += 1; f.allocated += b.size; f.requested += b.requested;
                }
            }
        }
        f.fragmentation = fragmentation(f.nonReleasable, f.reserved);
        f.freeScatter = f.free <= 0 ? 0 : 1 - f.largest / f.free;
        return f;
    }

    /* Each pool's figures: the general pool (0, 0) first, then private pools by id. */
    function pools(state) {
        const byPool = new Map();
        for (const seg of state) {
            const id = seg.poolId || [0, 0];
            const key = id[0] + "," + id[1];
            if (!byPool.has(key)) byPool.set(key, {id: id, segments: []});
            byPool.get(key).segments.push(seg);
        }
        const list = [...byPool.values()].map((p) => Object.assign(totals(p.segments), {
            pool: p.id, isPrivate: p.id[0] !== 0 || p.id[1] !== 0}));
        return list.sort((a, b) => (a.isPrivate - b.isPrivate) || (a.pool[0] - b.pool[0]) || (a.pool[1] - b.pool[1]));
    }

    /* Python's round-half-even where a value is exactly halfway (JavaScript's toFixed rounds it up). */
    function fixed(value, digits) {
        const scale = Math.pow(10, digits);
        const scaled = value * scale;
        if (Math.abs(scaled - Math.trunc(scaled)) === 0.5) {
            const low = Math.floor(scaled);
            return ((low % 2 === 0 ? low : low + 1) / scale).toFixed(digits);
        }
        return value.toFixed(digits);
    }

    /* fragviz.base.units.format_bytes */
    function formatBytes(n) {
        const sign = n < 0 ? "-" : "";
        n = Math.abs(n);
        if (n < 1024) return sign + Math.trunc(n) + " B";
        if (n < MiB) return sign + fixed(n / 1024, 2) + " KiB";
        if (n < 1024 * MiB) return sign + fixed(n / MiB, 2) + " MiB";
        return sign + fixed(n / (1024 * MiB), 2) + " GiB";
    }

    function percent(ratio) {
        return fixed(ratio * 100, 1) + "%";
    }

    function counted(n, noun) {
        return n + " " + noun + (n === 1 ? "" : "s");
    }

    /* The line above the segment map (fragviz.ui.pages.snapshot.state.event_info). */
    function eventInfo(event, n, f) {
        const fb = formatBytes;
        let line = "after " + event + " of " + n + " events · reserved " + fb(f.reserved) + " · allocated "
            + fb(f.allocated) + " · fragmentation " + percent(f.fragmentation) + " (non-releasable "
            + fb(f.nonReleasable) + ") · largest request the cache can serve now " + fb(f.largest)
            + " · cached free " + fb(f.free) + " in " + counted(f.freeBlocks, "gap") + ", free scatter "
            + percent(f.freeScatter);
        if (f.pools.some((p) => p.isPrivate)) {
            line += " · those figures cover all pools: " + f.pools.map((p) => "pool (" + p.pool[0] + ", " + p.pool[1]
                + ") " + fb(p.reserved) + " with " + fb(p.free) + " free"
                + (p.isPrivate ? " (private: general requests cannot use it)" : " (general)")).join("; ");
        }
        if (f.pending.blocks) {
            line += " · " + counted(f.pending.blocks, "block") + " (" + fb(f.pending.bytes)
                + ") freed, waiting for stream work (active_pending_free), counted as allocated";
        }
        return line;
    }

    fv.lives = {decode, stateAt, figures, eventInfo, formatBytes, percent, counted, stuckInGap};
})(window.fragviz);
