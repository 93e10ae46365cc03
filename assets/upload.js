// The library's upload area: a hidden file input added to #upload, each file POSTed to /api/snapshots with its
// progress shown, then a link to its view or the loader's one-line error. Text is set with textContent only.
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
    return list.reduce(function (done, file) {
      return done.then(function () { return uploadOne(file, results); });
    }, Promise.resolve()).then(function () {
      var refresh = document.getElementById("upload-done");
      if (refresh) { refresh.click(); }
    });
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

      var xhr = new XMLHttpRequest();
      xhr.open("POST", "/api/snapshots");
      xhr.upload.onprogress = function (e) {
        if (!e.lengthComputable) { return; }
        bar.value = 100 * e.loaded / e.total;
        if (e.loaded === e.total) { bar.removeAttribute("value"); status.textContent = "reading and ingesting…"; }
      };
      xhr.onload = function () {
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
        } else {
          status.textContent = problemOf(body) || ("upload failed: HTTP " + xhr.status);
          row.classList.add("fv-bad");
        }
        resolve();
      };
      xhr.onerror = function () {
        bar.remove();
        status.textContent = "upload failed: the server could not be reached";
        row.classList.add("fv-bad");
        resolve();
      };
      // The file itself as the body: the server reads it without parsing multipart (see api.py).
      xhr.setRequestHeader("Content-Type", "application/octet-stream");
      xhr.setRequestHeader("X-Filename", encodeURIComponent(file.name));
      xhr.send(file);
    });
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
