"""What every figure shares: the colours, the byte unit an axis is drawn in, round ticks for a fraction."""
from __future__ import annotations

import math

from fragviz.base.units import GiB, KiB, MiB

# Okabe-Ito: distinguishable with every common colour-vision deficiency.
COLORS = {"allocated": "#0072B2", "requested": "#56B4E9", "reserved": "#E69F00", "free": "#009E73",
          "fragmentation": "#CC79A7", "oom": "#D55E00", "pending": "#F0E442", "waste": "#003F63",
          "segment": "#999999", "selected": "#000000"}

# The left and right margins of the charts drawn over a trace's events, one above the other on the snapshot page
# (the timeline, memory by kind, the allocation bands): their x axes line up, room left for the timeline's
# fragmentation axis on the right
TRACE_X_MARGIN = dict(l=64, r=64)

# Round ticks for a 0..1 axis: an overlaying axis otherwise takes its ticks from the primary's (19 %, 37 %, ...)
FRACTION_TICKS = dict(tickmode="array", tickvals=[0, 0.2, 0.4, 0.6, 0.8, 1.0], tickformat=".0%")


def unit_for(max_bytes: float) -> tuple[float, str]:
    """(scale, name) of the largest binary unit `max_bytes` reaches: an axis drawn in it reads 1.5, not 1.6e9."""
    for scale, name in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if max_bytes >= scale:
            return float(scale), name
    return 1.0, "B"


def round_ticks(top: float, most: int = 6) -> dict:
    """Ticks at round values (1, 2 or 5 times a power of ten) from 0 to at least `top`, at most `most` steps apart,
    and the range they span: an axis that overlays another otherwise ticks at odd values (3.7, 7.4, ...)."""
    if not top > 0:
        return dict(tickmode="array", tickvals=[0, 1], range=[0, 1])
    magnitude = 10.0 ** math.floor(math.log10(top / most))
    step = next(m * magnitude for m in (1, 2, 5, 10, 20) if top / (m * magnitude) <= most)
    count = math.ceil(top / step - 1e-9)
    values = [round(i * step, 12) for i in range(count + 1)]
    return dict(tickmode="array", tickvals=values, range=[0, values[-1] * 1.04])
