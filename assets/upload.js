// The library's upload area: a hidden file input added to #upload, each file POSTed to /api/snapshots with its
// progress shown. One file, once stored, opens its snapshot page; of several, each row ends with a link to its
// view or the loader's one-line error. Text is set with textContent only.
(function () {
  "use strict";

  function ensureInput() {
    var zone = document.getElementById("upload");
    if (!zone || zone.querySelector("input[type=file]")) { return; }
    var input = document.createElement("input");
    input.type = "file";
    input.multiple = true;
    input.accept = ".pickle,.pkl,.gz,.json";
    input.className = "fv-file";
    input.setAttribute("aria-label", "snapshot files");
    zone.appendChild(input);
    input.addEventListener("change", function () { uploadAll(input.files).then(function () { input.value = ""; }); });
    zone.addEventListener("click", function (e) { if (e.target !== input) { input.click(); } });
    zone.addEventListener("keydown", function (e) {
      if (e.target === zone && (e.key === "Enter" || e.key === " ")) { e.preventDefault(); input.click(); }
    });
    zone.addEventListener("dragover", function (e) { e.preventDefault(); zone.classList.add("fv-drag"); });
    zone.addEventListener("dragleave", function () { zone.classList.remove("fv-drag"); });
    zone.addEventListener("drop", function (e) {
      e.preventDefault();
      zone.classList.remove("fv-drag");
      uploadAll(e.dataTransfer.files);
    });
  }

  function uploadAll(files) {
    var results = document.getElementById("upload-results");
    var list = Array.prototype.slice.call(files || []);
    var stored = [];
    return list.reduce(function (done, file) {
      return done.then(function () { return uploadOne(file, results).then(function (id) { stored.push(id); }); });
    }, Promise.resolve()).then(function () {
      if (list.length === 1 && stored[0] !== null) { return open("/snapshots/" + stored[0]); }
      var refresh = document.getElementById("upload-done");
      if (refresh) { refresh.click(); }
    });
  }

  // The page at `href`, reached as a dcc.Link reaches it: no reload, the app's router draws it
  function open(href) {
    window.history.pushState({}, "", href);
    window.dispatchEvent(new CustomEvent("_dashprivate_pushstate"));
    window.scrollTo(0, 0);
  }

  // The row already names the file: show the error without the "NAME: " it starts with (the server's name).
  function problemOf(body) {
    var error = body.error || "";
    var prefix = body.file ? body.file + ": " : null;
    return prefix && error.indexOf(prefix) === 0 ? error.slice(prefix.length) : error;
  }

  function uploadOne(file, results) {
    return new Promise(function (resolve) {
      var row = document.createElement("div");
      row.className = "fv-upload-row";
      var name = document.createElement("span");
      name.className = "fv-upload-name";
      name.textContent = file.name;
      var bar = document.createElement("progress");
      bar.max = 100;
      bar.value = 0;
      var status = document.createElement("span");
      status.className = "fv-upload-status";
      status.textContent = "uploading…";
      row.appendChild(name);
      row.appendChild(bar);
      row.appendChild(status);
      results.insertBefore(row, results.firstChild);

      var uploadId = newUploadId();
      var follow = null;
      var xhr = new XMLHttpRequest();
      xhr.open("POST", "/api/snapshots");
      xhr.upload.onprogress = function (e) {
        if (!e.lengthComputable) { return; }
        bar.value = 100 * e.loaded / e.total;
        if (e.loaded === e.total && !follow) {
          bar.removeAttribute("value");
          status.textContent = "reading and ingesting…";
          follow = followIngest(uploadId, row, bar, status);
        }
      };
      xhr.onload = function () {
        if (follow) { follow.stop(); }
        if (xhr.status < 300) { (follow || followIngest(uploadId, row, bar, status, true)).last(); }
        bar.remove();
        var body = {};
        try { body = JSON.parse(xhr.responseText); } catch (err) { body = {}; }
        if (xhr.status < 300 && body.id !== undefined) {
          var link = document.createElement("a");
          link.href = "/snapshots/" + body.id;
          link.className = "fv-upload-link";
          link.textContent = body.status === "unchanged" ? "already in the library: view it" : "view it";
          status.textContent = "";
          status.appendChild(link);
          row.classList.add("fv-ok");
          var note = row.nextSibling && row.nextSibling.querySelector && row.nextSibling.querySelector(".fv-preview-note");
          if (note) { note.remove(); }  // what it promised is there: the link
          resolve(body.id);
        } else {
          status.textContent = problemOf(body) || ("upload failed: HTTP " + xhr.status);
          row.classList.add("fv-bad");
          resolve(null);
        }
      };
      xhr.onerror = function () {
        if (follow) { follow.stop(); }
        bar.remove();
        status.textContent = "upload failed: the server could not be reached";
        row.classList.add("fv-bad");
        resolve(null);
      };
      // The file itself as the body: the server reads it without parsing multipart (see api.py).
      xhr.setRequestHeader("Content-Type", "application/octet-stream");
      xhr.setRequestHeader("X-Filename", encodeURIComponent(file.name));
      xhr.setRequestHeader("X-Upload-Id", uploadId);
      xhr.send(file);
    });
  }

  function newUploadId() {
    if (window.crypto && window.crypto.randomUUID) { return window.crypto.randomUUID(); }
    return "u" + Date.now().toString(36) + Math.random().toString(36).slice(2, 12);
  }

  var PHASE_TEXT = { send: "sending…", read: "reading…", decode: "decoding…", parse: "parsing…", replay: "replaying",
                     store: "storing…" };

  // While the server ingests, its progress (GET /api/uploads/<id>) shows in the row: the phase, the events
  // replayed, and the first picture (requested and reserved bytes over time) as soon as the trace is parsed.
  function followIngest(uploadId, row, bar, status, quiet) {
    var stopped = !!quiet;
    var drawn = false;
    function look() {
      // sending=1: until the server's handler has the upload, the id reads as "send", not as a 404
      return fetch("/api/uploads/" + encodeURIComponent(uploadId) + "?sending=1").then(function (r) {
        return r.ok ? r.json() : null;
      });
    }
    function draw(state) {
      // a trace to draw: a device without one (a snapshot of its state alone) has no line over events
      var traced = state && state.preview && state.preview.filter(function (d) { return d.events > 0; });
      if (traced && traced.length && !drawn) {
        drawn = true;  // once the link is in, the note's promise is kept: no note
        row.parentNode.insertBefore(previewOf(traced, !row.classList.contains("fv-ok")), row.nextSibling);
      }
    }
    function poll() {
      if (stopped) { return; }
      look().then(function (state) {
        if (stopped || !state) { return; }
        if (state.phase === "replay" && state.total > 0) {
          bar.max = state.total;
          bar.value = state.done;
          status.textContent = "replaying " + Math.floor(100 * state.done / state.total) + "%";
        } else if (state.phase) {
          status.textContent = PHASE_TEXT[state.phase] || state.phase;
        }
        draw(state);
      }).catch(function () { /* the next poll tries again */ }).then(function () {
        if (!stopped) { setTimeout(poll, 250); }
      });
    }
    poll();
    return {
      stop: function () { stopped = true; },
      // once the answer is in: the picture, if no poll caught it while the ingest ran
      last: function () { if (!drawn) { look().then(draw).catch(function () {}); } }
    };
  }

  var SVG = "http://www.w3.org/2000/svg";
  var COLORS = { requested: "#56B4E9", reserved: "#E69F00" };

  function gib(n) { return (n / 1073741824).toFixed(2) + " GiB"; }

  function previewOf(devices, noted) {
    var box = document.createElement("div");
    box.className = "fv-preview";
    box.setAttribute("data-devices", String(devices.length));
    devices.forEach(function (d) { box.appendChild(devicePreview(d)); });
    var note = document.createElement("div");
    note.className = "fv-preview-note";
    note.textContent = "first picture, from the trace alone: fragmentation, segment maps and allocated bytes " +
                       "follow when the replay is done";
    if (noted) { box.appendChild(note); }
    return box;
  }

  function svgText(x, y, text, cls, color) {
    var t = document.createElementNS(SVG, "text");
    t.setAttribute("x", String(x));
    t.setAttribute("y", String(y));
    t.setAttribute("class", cls);
    if (color) { t.setAttribute("fill", color); }
    t.textContent = text;
    return t;
  }

  // One device's requested and reserved bytes over its events, from 0 to a tenth above the reserved peak.
  function devicePreview(d) {
    var W = 600, H = 110, PAD = 12;
    var peakReserved = Math.max.apply(null, d.reserved.concat([0]));
    var peakRequested = Math.max.apply(null, d.requested.concat([0]));
    var top = 1.1 * Math.max(peakReserved, peakRequested, 1);
    var last = Math.max(1, d.events);
    var svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("viewBox", "0 0 " + W + " " + (H + PAD + 16));
    svg.setAttribute("class", "fv-preview-chart");
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", "device " + d.device + ": requested and reserved bytes over " + d.events +
                     " events; reserved peaks at " + gib(peakReserved));
    ["reserved", "requested"].forEach(function (name) {
      var pts = d[name].map(function (v, i) {
        return (W * d.event[i] / last).toFixed(1) + "," + (PAD + H - H * v / top).toFixed(1);
      });
      var line = document.createElementNS(SVG, "polyline");
      line.setAttribute("points", pts.join(" "));
      line.setAttribute("fill", "none");
      line.setAttribute("stroke", COLORS[name]);
      line.setAttribute("stroke-width", "1.5");
      line.setAttribute("class", "fv-preview-" + name);
      svg.appendChild(line);
    });
    svg.appendChild(svgText(4, PAD + H - H * peakReserved / top - 3, gib(peakReserved), "fv-preview-axis"));
    svg.appendChild(svgText(W - 150, 10, "— reserved", "fv-preview-legend", COLORS.reserved));
    svg.appendChild(svgText(W - 75, 10, "— requested", "fv-preview-legend", COLORS.requested));
    svg.appendChild(svgText(4, PAD + H + 13, "device " + d.device + " · peak reserved " + gib(peakReserved) +
                            " · peak requested " + gib(peakRequested) + " · " + d.events.toLocaleString("en-US") +
                            " events", "fv-preview-label"));
    return svg;
  }

  new MutationObserver(ensureInput).observe(document.documentElement, { childList: true, subtree: true });
  document.addEventListener("DOMContentLoaded", ensureInput);

  // Arrow keys step through events on a snapshot page (unless typing in a field).
  document.addEventListener("keydown", function (e) {
    var tag = (e.target && e.target.tagName) || "";
    if (tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT") { return; }
    var id = e.key === "ArrowRight" ? "next-event" : e.key === "ArrowLeft" ? "prev-event" : null;
    var button = id && document.getElementById(id);
    if (button) { e.preventDefault(); button.click(); }
  });
})();
