// The snapshot page's segment map draws its size axis apart (#segment-map-axis, sticky above the map that
// scrolls). After every draw of either, the axis takes the map's x range (zoom, pan) and its left and right
// margins (the map's row labels set its left margin), so that ticks and bars line up.
(function () {
  "use strict";

  function plots() {
    return [document.querySelector("#segment-map .js-plotly-plot"),
            document.querySelector("#segment-map-axis .js-plotly-plot")];
  }

  function align() {
    var p = plots(), map = p[0], axis = p[1];
    if (!map || !axis || !map._fullLayout || !axis._fullLayout || !window.Plotly) { return; }
    var size = map._fullLayout._size, range = map._fullLayout.xaxis.range;
    var now = axis._fullLayout, nowRange = now.xaxis.range;
    var update = {};
    if (now._size.l !== size.l || now._size.r !== size.r) {
      update["margin.l"] = size.l;
      update["margin.r"] = size.r;
      update["yaxis.automargin"] = false;  // the margins given, exactly
    }
    if (nowRange[0] !== range[0] || nowRange[1] !== range[1]) { update["xaxis.range"] = range.slice(); }
    if (Object.keys(update).length) { window.Plotly.relayout(axis, update); }
  }

  var ns = (window.dash_clientside = window.dash_clientside || {});
  ns.fragviz = Object.assign(ns.fragviz || {}, {
    // Called when either figure changes: the plots may not be drawn yet, so wait for them (a few seconds at
    // most), then follow each later draw through Plotly's own events.
    syncSegmentAxis: function () {
      var tries = 0;
      (function attach() {
        var p = plots();
        if (!(p[0] && p[1] && p[0].on && p[1].on && p[0]._fullLayout && p[1]._fullLayout)) {
          if (tries++ < 300) { window.requestAnimationFrame(attach); }
          return;
        }
        p.forEach(function (gd) {
          if (!gd.__fvAxisSync) {
            gd.__fvAxisSync = true;
            gd.on("plotly_afterplot", align);
            gd.on("plotly_relayout", align);
          }
        });
        align();
      })();
      return window.dash_clientside.no_update;
    },
  });
})();
