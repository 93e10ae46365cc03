// The snapshot page's segment map draws its size axis apart (#segment-map-axis, sticky above the map that
// scrolls). After every draw of either, the axis takes the map's x range (zoom, pan) and its left and right
// margins (the map's row labels set its left margin), so that ticks and bars line up. The map's plot area is
// read from the SVG Plotly draws and the ranges from the graphs' layouts (window.fragvizPlots, clientside.js).
(function () {
  "use strict";

  function plots() {
    return [document.querySelector("#segment-map .js-plotly-plot"),
            document.querySelector("#segment-map-axis .js-plotly-plot")];
  }

  function align() {
    var p = plots(), map = p[0], axis = p[1];
    var area = map && window.fragvizPlots.plotArea(map);
    var range = map && window.fragvizPlots.axisRange(map, "xaxis");
    if (!area || !range || !axis || !axis.layout || !window.Plotly) { return; }
    var margin = axis.layout.margin || {}, yaxis = axis.layout.yaxis || {};
    var nowRange = window.fragvizPlots.axisRange(axis, "xaxis") || [];
    var update = {};
    // the axis (a static plot) keeps the margins it was given: exactly the map's once set
    if (margin.l !== area.l || margin.r !== area.r || yaxis.automargin !== false) {
      update["margin.l"] = area.l;
      update["margin.r"] = area.r;
      update["yaxis.automargin"] = false;  // the margins given, exactly
    }
    if (nowRange[0] !== range[0] || nowRange[1] !== range[1]) { update["xaxis.range"] = range.slice(); }
    if (Object.keys(update).length) { window.Plotly.relayout(axis, update); }
  }

  function drawn(p) {
    return p[0] && p[1] && p[0].on && p[1].on && window.fragvizPlots.plotArea(p[0]) && p[1].querySelector(".main-svg");
  }

  var ns = (window.dash_clientside = window.dash_clientside || {});
  ns.fragviz = Object.assign(ns.fragviz || {}, {
    // Called when either figure changes: the plots may not be drawn yet, so wait for them (a few seconds at
    // most), then follow each later draw through Plotly's own events.
    syncSegmentAxis: function () {
      var tries = 0;
      (function attach() {
        var p = plots();
        if (!drawn(p)) {
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
