// The dashboard's clientside callbacks that fit in a few lines (Python names each with
// ClientsideFunction("fragviz", name)), and what every clientside script shares (window.fragvizPlots).
// Nothing here reads Plotly's private fields: the data comes as arguments (a figure, its layout.meta), and a
// graph's plot area from the SVG Plotly draws.
(function () {
  "use strict";

  // A graph's plot area in pixels ({l, t, w, h, r}: left, top, width, height, right margin), from the rectangle
  // Plotly's drag layer lays over its main subplot; null before it is drawn (and for a static plot, which has
  // no drag layer)
  function plotArea(gd) {
    var rect = gd && gd.querySelector(".draglayer .nsewdrag");
    var svg = gd && gd.querySelector(".main-svg");
    if (!rect || !svg) { return null; }
    var l = Number(rect.getAttribute("x")), t = Number(rect.getAttribute("y"));
    var w = Number(rect.getAttribute("width")), h = Number(rect.getAttribute("height"));
    var width = Number(svg.getAttribute("width"));
    if (!(w > 0 && h > 0 && width > 0)) { return null; }
    return {l: l, t: t, w: w, h: h, r: Math.round(width) - l - w};
  }

  // The range a graph's axis shows now (the figure's, or the one a zoom or autorange wrote into its layout)
  function axisRange(gd, axis) {
    var a = gd && gd.layout && gd.layout[axis];
    return a && a.range && a.range.length === 2 ? [Number(a.range[0]), Number(a.range[1])] : null;
  }

  // Where the timeline draws event `k`: on its x axis by event, k; by time, the seconds of the first point at or
  // after it (the figure's meta.event_seconds: each point's event and seconds, see figures/timeline.py)
  function eventX(figure, k) {
    var m = figure && figure.layout && figure.layout.meta && figure.layout.meta.event_seconds;
    if (!m || !m.events || !m.events.length) { return k; }
    var i = 0;
    while (i < m.events.length - 1 && m.events[i] < k) { i += 1; }
    return m.seconds[i];
  }

  // The event at `s` seconds on the timeline drawn by time, interpolated between its points (the inverse of
  // eventX); `s` itself where the figure is drawn by event
  function secondsToEvent(figure, s) {
    var m = figure && figure.layout && figure.layout.meta && figure.layout.meta.event_seconds;
    if (!m || !m.events || !m.events.length) { return null; }
    var seconds = m.seconds, events = m.events, n = seconds.length;
    if (s <= seconds[0]) { return events[0]; }
    for (var i = 1; i < n; i++) {
      if (seconds[i] >= s) {
        var f = seconds[i] === seconds[i - 1] ? 0 : (s - seconds[i - 1]) / (seconds[i] - seconds[i - 1]);
        return events[i - 1] + f * (events[i] - events[i - 1]);
      }
    }
    return events[n - 1];
  }

  // A vertical line over a graph's plot area at `x` on its x axis (an element laid over the plot: moving it redraws
  // nothing); hidden outside the range shown or where `x` is not a number
  function placeLine(plot, x) {
    var size = plotArea(plot), range = axisRange(plot, "xaxis");
    if (!size || !range || range[1] === range[0]) { return; }
    var line = plot.querySelector(".fv-event-line");
    if (!line) {
      line = document.createElement("div");
      line.className = "fv-event-line";
      plot.appendChild(line);
    }
    var px = (x - range[0]) / (range[1] - range[0]) * size.w;
    line.setAttribute("data-x", String(x));
    line.style.display = px >= 0 && px <= size.w ? "block" : "none";
    line.style.left = (size.l + px) + "px";
    line.style.top = size.t + "px";
    line.style.height = size.h + "px";
  }

  // The timeline's line at its selected event (plot.__fvEvent; by time, where the figure's meta puts it)
  function placeTimelineLine(plot) {
    if (typeof plot.__fvEvent === "number") { placeLine(plot, eventX({layout: plot.layout}, plot.__fvEvent)); }
  }

  window.fragvizPlots = {plotArea: plotArea, axisRange: axisRange, eventX: eventX, secondsToEvent: secondsToEvent,
                         placeLine: placeLine};

  var ns = (window.dash_clientside = window.dash_clientside || {});
  ns.fragviz = Object.assign(ns.fragviz || {}, {
    // The snapshot page's selected event (`event`, from the state's callback) as the timeline's one line: an
    // element laid over the plot, placed from its x axis (by time, where the figure's meta puts the event), and
    // placed again after each redraw (a zoom, the other axis); moving it redraws nothing of the timeline
    timelineEventLine: function (event) {
      if (typeof event !== "number") { return window.dash_clientside.no_update; }
      var tries = 0;
      (function place() {  // the timeline may not be drawn yet: wait for it (a few seconds at most)
        var plot = document.querySelector("#timeline .js-plotly-plot");
        if (!plot || !plot.on || !plotArea(plot)) {
          if (tries++ < 300) { window.requestAnimationFrame(place); }
          return;
        }
        plot.__fvEvent = event;
        if (!plot.__fvLine) {
          plot.__fvLine = true;
          plot.on("plotly_afterplot", function () { placeTimelineLine(plot); });
        }
        placeTimelineLine(plot);
      })();
      return window.dash_clientside.no_update;
    },
  });
})();
