// The snapshot page's views of what holds memory: the range they show, and the selected event's line.
(function () {
  var ns = (window.dash_clientside = window.dash_clientside || {});
  ns.fragviz = ns.fragviz || {};

  // The events a drag on the timeline, the bands or the kind areas asks for, taken in the browser (no
  // round trip before the views are asked for): {lo, hi, from}, or {all: true, from} for a reset.
  ns.fragviz.usageRange = function (timelineZoom, bandsZoom, kindsZoom, axis) {
    var trig = (window.dash_clientside.callback_context.triggered || [])[0];
    var id = trig ? trig.prop_id.split('.')[0] : '';
    var zoom = {'timeline': timelineZoom, 'allocation-bands': bandsZoom, 'memory-by-kind': kindsZoom}[id];
    if (!zoom) { return window.dash_clientside.no_update; }
    var lo, hi;
    if ('xaxis.range[0]' in zoom) { lo = zoom['xaxis.range[0]']; hi = zoom['xaxis.range[1]']; }
    else if (zoom['xaxis.range']) { lo = zoom['xaxis.range'][0]; hi = zoom['xaxis.range'][1]; }
    else if (zoom['xaxis.autorange']) { return {all: true, from: id}; }
    else { return window.dash_clientside.no_update; }
    if (id === 'timeline' && axis === 'time') {
      // by time, each timeline point carries its event: interpolate the seconds dragged to events
      var plot = document.querySelector('#timeline .js-plotly-plot');
      var d = plot && plot._fullData && plot._fullData[0];
      if (!d || !d.customdata) { return window.dash_clientside.no_update; }
      lo = toEvent(d.x, d.customdata, lo);
      hi = toEvent(d.x, d.customdata, hi);
    }
    return {lo: Math.max(0, Math.floor(lo)), hi: Math.max(0, Math.ceil(hi)), from: id};
  };

  function toEvent(seconds, events, s) {
    var n = seconds.length;
    if (s <= seconds[0]) { return events[0]; }
    for (var i = 1; i < n; i++) {
      if (seconds[i] >= s) {
        var f = seconds[i] === seconds[i - 1] ? 0 : (s - seconds[i - 1]) / (seconds[i] - seconds[i - 1]);
        return events[i - 1] + f * (events[i] - events[i - 1]);
      }
    }
    return events[n - 1];
  }

  // The selected event's line on both views, moved in the browser as on the timeline
  ns.fragviz.usageEventLine = function (info) {
    var m = /after (\d+) of/.exec(info || '');
    if (!m || !window.Plotly) { return window.dash_clientside.no_update; }
    var k = Number(m[1]);
    ['allocation-bands', 'memory-by-kind'].forEach(function (id) {
      var plot = document.querySelector('#' + id + ' .js-plotly-plot');
      if (plot && plot.layout) {
        window.Plotly.relayout(plot, {shapes: [{type: 'line', xref: 'x', yref: 'paper', x0: k, x1: k, y0: 0, y1: 1,
                                                line: {color: '#000000', width: 1}}]});
      }
    });
    return window.dash_clientside.no_update;
  };
})();
