// The snapshot page's views of what holds memory: the range they show, and the selected event's line.
(function () {
  var ns = (window.dash_clientside = window.dash_clientside || {});
  ns.fragviz = ns.fragviz || {};

  // The events a drag on the timeline, the bands or the kind areas asks for, taken in the browser (no
  // round trip before the views are asked for): {lo, hi, from}, or {all: true, from} for a reset; twice:
  // for the two views, and for the timeline (only when the drag was elsewhere: it refines its own drags).
  // `timeline` is the timeline's figure: drawn by time, its meta says which event each point is.
  ns.fragviz.usageRange = function (timelineZoom, bandsZoom, kindsZoom, axis, timeline) {
    var range = takeRange(timelineZoom, bandsZoom, kindsZoom, axis, timeline);
    var none = window.dash_clientside.no_update;
    if (range === none) { return [none, none]; }
    return [range, range.from === 'timeline' ? none : range];
  };

  function takeRange(timelineZoom, bandsZoom, kindsZoom, axis, timeline) {
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
      // by time, the timeline's figure says which event each point is: interpolate the seconds dragged to events
      lo = window.fragvizPlots.secondsToEvent(timeline, lo);
      hi = window.fragvizPlots.secondsToEvent(timeline, hi);
      if (lo === null || hi === null) { return window.dash_clientside.no_update; }
    }
    return {lo: Math.max(0, Math.floor(lo)), hi: Math.max(0, Math.ceil(hi)), from: id};
  }

  // The selected event's line on both views: an element laid over each plot, placed from its x axis, so that
  // moving it redraws nothing (a relayout of the shapes redraws every band: hundreds of milliseconds)
  var GRAPHS = ['allocation-bands', 'memory-by-kind'];
  var selected = null;

  // Both x axes are linear: a pixel's value is its share of the plot area, across the range shown
  function toValue(range, length, pixel) {
    return range[0] + pixel / length * (range[1] - range[0]);
  }

  function placeLine(plot) {
    window.fragvizPlots.placeLine(plot, selected === null ? NaN : selected);
  }

  // The bands' words under the pointer, and a clicked band sent to the stack panel: the rectangles and their
  // words come in the figure (layout.meta.bands, see figures/usage.py), so no point of Plotly's is needed
  function bandAt(plot, event) {
    var table = plot.layout && plot.layout.meta && plot.layout.meta.bands;
    var size = window.fragvizPlots.plotArea(plot);
    var xr = window.fragvizPlots.axisRange(plot, 'xaxis'), yr = window.fragvizPlots.axisRange(plot, 'yaxis');
    if (!table || !size || !xr || !yr) { return null; }
    var box = plot.getBoundingClientRect();
    var px = event.clientX - box.left - size.l;
    var py = event.clientY - box.top - size.t;
    if (px < 0 || py < 0 || px > size.w || py > size.h) { return null; }
    var x = toValue(xr, size.w, px), y = toValue(yr, size.h, size.h - py);  // pixels grow down, y up
    for (var i = 0; i < table.x0.length; i++) {
      if (x >= table.x0[i] && x < table.x1[i] && y >= table.y0[i] && y <= table.y1[i]) {
        return {text: table.text[table.band[i]], row: table.row[table.band[i]]};
      }
    }
    var f = table.folded;
    for (var k = 0; f && k < f.x0.length; k++) {
      if (x >= f.x0[k] && x < f.x1[k] && y >= f.y0[k] && y <= f.y1[k]) {
        return {text: '<b>' + formatBytes(f.bytes[k]) + '</b> in smaller allocations of ' + f.names[f.group[k]] +
                      '<br>(folded: each too small to draw apart here; zoom in)<br>state ' + f.state[k], row: null};
      }
    }
    return null;
  }

  // As fragviz.units.format_bytes: '512 B', '1.50 MiB', '79.10 GiB'
  function formatBytes(n) {
    var units = [[1 << 30, 'GiB'], [1 << 20, 'MiB'], [1 << 10, 'KiB']];
    for (var i = 0; i < units.length; i++) {
      if (n >= units[i][0]) { return (n / units[i][0]).toFixed(2) + ' ' + units[i][1]; }
    }
    return Math.floor(n) + ' B';
  }

  function tip(plot) {
    var el = plot.querySelector('.fv-band-tip');
    if (!el) {
      el = document.createElement('div');
      el.className = 'fv-band-tip';
      plot.appendChild(el);
    }
    return el;
  }

  // Listened for on the document (the plot's element is replaced when the graph is drawn again)
  function bandsPlot(event) {
    var el = event.target && event.target.closest && event.target.closest('#allocation-bands .js-plotly-plot');
    return el || null;
  }

  document.addEventListener('mousemove', function (event) {
    var plot = bandsPlot(event);
    var shown = document.querySelectorAll('#allocation-bands .fv-band-tip');
    if (!plot) {
      shown.forEach(function (el) { el.style.display = 'none'; });
      return;
    }
    var found = event.buttons ? null : bandAt(plot, event), el = tip(plot);
    if (!found) { el.style.display = 'none'; return; }
    var box = plot.getBoundingClientRect();
    el.innerHTML = found.text;  // escaped by the server: sites and frames are text
    el.style.display = 'block';
    el.style.left = Math.max(0, Math.min(event.clientX - box.left + 14, box.width - el.offsetWidth - 4)) + 'px';
    var below = event.clientY - box.top + 14;  // below the pointer, or above it where the plot ends
    el.style.top = (below + el.offsetHeight > box.height ? Math.max(0, below - el.offsetHeight - 28) : below) + 'px';
  }, true);

  // Plotly covers the page while a button is down (for its drag-zoom), so the button's release is heard on
  // the document; a release where it was pressed is a click
  document.addEventListener('mousedown', function (event) {
    var plot = bandsPlot(event);
    if (!plot) { return; }
    var down = [event.clientX, event.clientY];
    document.addEventListener('mouseup', function (up) {
      if (Math.abs(up.clientX - down[0]) > 3 || Math.abs(up.clientY - down[1]) > 3) { return; }
      var found = bandAt(plot, up);
      if (found && found.row !== null && window.dash_clientside.set_props) {
        window.dash_clientside.set_props('band-click', {data: {row: found.row, at: Date.now()}});
      }
    }, {capture: true, once: true});
  }, true);

  // `event` comes from the state's callback (the figures only say when to place the lines again)
  ns.fragviz.usageEventLine = function (event) {
    if (typeof event !== 'number') { return window.dash_clientside.no_update; }
    selected = event;
    GRAPHS.forEach(function (id) {
      var plot = document.querySelector('#' + id + ' .js-plotly-plot');
      if (!plot) { return; }
      if (!plot.__fvLine && plot.on) {  // placed again after every redraw (a new range, a resize)
        plot.__fvLine = true;
        plot.on('plotly_afterplot', function () { placeLine(plot); });
      }
      placeLine(plot);
    });
    return window.dash_clientside.no_update;
  };
})();
