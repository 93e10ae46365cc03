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

  window.fragvizPlots = {plotArea: plotArea, axisRange: axisRange, eventX: eventX, secondsToEvent: secondsToEvent};

  var ns = (window.dash_clientside = window.dash_clientside || {});
  ns.fragviz = Object.assign(ns.fragviz || {}, {
    // `value`, 120 ms later: what follows it is drawn after what the browser is drawing now
    later: function (value) {
      return new Promise(function (resolve) { setTimeout(function () { resolve(value); }, 120); });
    },

    // The snapshot page's selected event (`event`, from the state's callback) as the timeline's one line
    timelineEventLine: function (event, figure) {
      var plot = document.querySelector("#timeline .js-plotly-plot");
      if (plot && window.Plotly && typeof event === "number") {
        var x = eventX(figure, event);
        window.Plotly.relayout(plot, {shapes: [{type: "line", xref: "x", yref: "paper", x0: x, x1: x, y0: 0, y1: 1,
                                                line: {color: "#000000", width: 1}}]});
      }
      return window.dash_clientside.no_update;
    },
  });
})();
