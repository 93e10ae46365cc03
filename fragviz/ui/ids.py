"""Component ids: every id of the dashboard is one of these (pattern-matching ids are built from them).
Outside checks and users rely on their values: keep them."""
URL = "url"
SNAPSHOT_URL = "snapshot-url"  # the snapshot page's own view of the URL: its callbacks exist only there
PAGE = "page"
UPLOAD = "upload"
PLOTLY_PRELOAD = "plotly-preload"  # a hidden graph on the library page: Plotly is loaded before a snapshot opens
UPLOAD_RESULTS = "upload-results"
UPLOAD_DONE = "upload-done"
LIBRARY = "library-table"
TIMELINE = "timeline"
TIMELINE_AXIS = "timeline-axis"
SEGMENT_MAP = "segment-map"
SEGMENT_MAP_ALL = "segment-map-all"  # checklist: draw every segment instead of folding the smallest
STACK_TRACE = "stack-trace"
STACK_ALL = "stack-all-frames"
GAP_HISTOGRAM = "gap-histogram"
OOM_VERDICT = "oom-verdict"
SITES_NOW = "sites-now"
SITES_PEAK = "sites-peak"
SITES_PEAK_INFO = "sites-peak-info"  # which peak the "at the peak" table shows
SITES_PEAK_JUMP = "sites-peak-jump"  # the link that selects the peak's event
ICICLE = "stack-icicle"
ICICLE_NOTE = "stack-icicle-note"  # why the icicle is not drawn (no live block with a stack)
TIMELINE_NOTE = "timeline-note"  # why there is no timeline (no trace), or why it is short
DEVICE = "device"
EVENT = "event"
PREV = "prev-event"
NEXT = "next-event"
EVENT_INFO = "event-info"
MARK_SIZE = "mark-size"
HEALTH = "capture-health"
WHATIF_CONF = "whatif-conf"
WHATIF_MEMORY = "whatif-memory"
WHATIF_RUN = "whatif-run"
WHATIF_STATUS = "whatif-status"
WHATIF_FIGURE = "whatif-timeline"
WHATIF_POLL = "whatif-poll"
COMPARE_A = "compare-a"
COMPARE_B = "compare-b"
COMPARE_TABLE = "compare-table"
COMPARE_FIGURE = "compare-figure"
COMPARE_EVENT_A = "compare-ea"
COMPARE_EVENT_B = "compare-eb"
COMPARE_DEVICE_A = "compare-device-a"
COMPARE_DEVICE_B = "compare-device-b"
COMPARE_SUMMARY = "compare-summary"
COMPARE_ALIGN = "compare-align"  # the shared axis of the aligned timelines: event, time or step (align= in the URL)
COMPARE_ALIGNED = "compare-aligned"  # both sides' memory over the shared axis; a click selects both states
COMPARE_ALIGNED_NOTE = "compare-aligned-note"  # what the step markers are, or why a side cannot be aligned
COMPARE_PEAKS = "compare-peaks"  # the button that puts each side at its own peak
# The compare page's memory gate: B judged against A as `fragviz gate B --baseline A` judges them
COMPARE_GATE_PEAK_RESERVED = "gate-max-peak-reserved"  # budget: a size ("2GiB"), gr= in the URL
COMPARE_GATE_PEAK_ALLOCATED = "gate-max-peak-allocated"  # budget: a size, ga= in the URL
COMPARE_GATE_GROWTH = "gate-max-growth"  # budget: growth of each peak over A's ("5%"), gg= in the URL
COMPARE_GATE_FRAGMENTATION = "gate-max-fragmentation"  # budget: a ratio at the reserved peak ("0.3"), gf= in the URL
COMPARE_GATE_DEVICE_MEMORY = "gate-device-memory"  # budget: B's trace simulated on a device this size, gd= in the URL
COMPARE_GATE_ALLOC_CONF = "gate-alloc-conf"  # the PYTORCH_CUDA_ALLOC_CONF of that simulation, gc= in the URL
COMPARE_GATE_VERDICT = "gate-verdict"  # passed, FAILED or cannot judge (and why); or why a budget is not understood
COMPARE_GATE_FIGURES = "gate-figures"  # each run's peaks and fragmentation at the peak, what the budgets judge
COMPARE_GATE_CHECKS = "gate-checks"  # a row per budget and device: value, limit, baseline, change, pass or FAIL
COMPARE_GATE_SITES_TITLE = "gate-sites-title"  # the sites table's title, or that no site grew
COMPARE_GATE_SITES = "gate-sites"  # the allocation sites whose memory at the reserved peak grew most
COMPARE_GATE_NOTES = "gate-notes"  # what the verdict rests on (a trace that starts mid-run, a simulated run)
COMPARE_GATE_REPRODUCE = "gate-reproduce"  # the command's line and caption, hidden when there is no verdict
COMPARE_GATE_COMMAND = "gate-command"  # <code>: the `fragviz gate` command line that gives the same verdict
LIVE_TARGET = "live-target"
LIVE_TOKEN = "live-token"
LIVE_ATTACH = "live-attach"
LIVE_STATUS = "live-status"
LIVE_ATTACHMENTS = "live-attachments"
LIVE_PANELS = "live-panels"
LIVE_CURSOR = "live-cursor"
LIVE_DEVICES = "live-devices"  # the devices of the chosen jobs: the panels are made again when they change
LIVE_INTERVAL = "live-interval"
# pattern-matching ids ({"type": ..., "index": "ATTACHMENT-DEVICE"}), one of each per panel
LIVE_CHART = "live-chart"
LIVE_NOW = "live-now"
LIVE_OOM_ALERT = "live-oom-alert"
LIVE_SAVE = "live-save"
LIVE_SAVE_RESULT = "live-save-result"
LIVE_SEGMENT_MAP = "live-segment-map"
LIVE_GAP_HISTOGRAM = "live-gap-histogram"
DOCTOR_PASTE = "doctor-paste"  # a memory_summary() table and/or an OOM message
DOCTOR_RUN = "doctor-run"
DOCTOR_RESULT = "doctor-result"
DOCTOR_SNAPSHOT = "doctor-snapshot"  # the ?snapshot=ID read with the paste
# What holds memory (the snapshot page): kind areas, allocation bands, and the range both show
MEMORY_BY = "memory-by-kind"
MEMORY_BY_GROUP = "memory-by-group"  # "kind" or "site"
KIND_NOTES = "kind-notes"  # why some memory has no stack recorded, and the rule behind parameters (inferred)
ALLOC_BANDS = "allocation-bands"
USAGE_RANGE = "usage-range"
STACK_SOURCE = "stack-source"  # what the stack panel shows: a block of the segment map or a band
STATE_SOURCE = "state-source"  # what the page needs to choose and draw a state itself (assets/state_view.js)
BLOCK_CLICK = "block-click"  # the block of the segment map last clicked: its device, event and address
SELECTED_EVENT = "selected-event"  # the event the snapshot page shows: lines on the timeline and the usage views
STATE_DRAWN = "state-drawn"  # the device whose first state is drawn: the rest of the page follows it
SITES_TRIGGER = "sites-trigger"  # each state drawn, a moment later: the sites and the icicle follow the state
BAND_CLICK = "band-click"  # {row, at}: the allocation of a clicked band (set in the browser, assets/usage.js)
TIMELINE_FOLLOW = "timeline-follow"  # a range dragged on the bands or the kind areas, for the timeline to follow
# The job page (/jobs/<id>) and the library's jobs card
LIBRARY_JOBS = "library-jobs"
JOB_TABLE = "job-ranks-table"  # the per-rank table (an html table; its headers sort it)
JOB_SORT = "job-sort"  # pattern-matching ({"type": JOB_SORT, "key": column}): a header's sort button
JOB_SORT_STATE = "job-sort-state"  # {"key": column, "desc": bool}
JOB_CHART = "job-ranks-chart"  # a bar per rank: a click opens its snapshot
JOB_IMBALANCE = "job-imbalance"
JOB_COMPARE = "job-compare-link"  # the largest rank against the median rank, aligned by step
JOB_DOWNLOADS = "job-downloads"
# The snapshot page's export card: what and format, and the download link to /api/snapshots/<id>/export
EXPORT = "export-card"
EXPORT_WHAT = "export-what"  # "series", "allocations" or "segments" (at the selected event)
EXPORT_FORMAT = "export-format"  # "parquet" or "csv"
EXPORT_LINK = "export-link"  # <a download href=...>: the file comes straight from the API route
EXPORT_NOTE = "export-note"
# The right device: the snapshot page's what-if link follows its device; the what-if page's own device picker
SNAPSHOT_WHATIF = "snapshot-whatif-link"
WHATIF_URL = "whatif-url"  # the what-if page's own view of the URL (?device=N), like SNAPSHOT_URL
WHATIF_DEVICE = "whatif-device"  # the device picker: the device the what-if runs on
WHATIF_BODY = "whatif-body"  # the settings and results of the chosen device, or why it cannot be simulated
WHATIF_SNAPSHOT_LINK = "whatif-snapshot-link"  # the title's link back to the snapshot page at the chosen device
WHATIF_JOB = "whatif-job"  # the running simulation's job id
SNAPSHOT_SUB = "snapshot-sub"  # the line under the snapshot page's title: format, size, the device's trace length
TIMELINE_BOX = "timeline-box"  # the timeline and its axis switch, hidden where the device has no trace
# The what-if page's code what-ifs (simulate --scale, --bucket, --paged-kv): parsed when Simulate is clicked
WHATIF_SCALE = "whatif-scale"  # TARGET=FACTOR, comma-separated: "activations=1.5"
WHATIF_BUCKET = "whatif-bucket"  # TARGET:K, comma-separated: "activations:8"
WHATIF_PAGED_KV = "whatif-paged-kv"  # [TARGET=]SIZE: "2MiB"
# The what-if page's "Predict a bigger run" card (`fragviz predict`): this snapshot and others, at sizes of a knob
WHATIF_PREDICT_WITH = "whatif-predict-with"  # multi dropdown: the other recordings of the same program
WHATIF_PREDICT_SIZES = "whatif-predict-sizes"  # the knob's value in each recording, this snapshot's first: "8 16"
WHATIF_PREDICT_KNOB = "whatif-predict-knob"  # what the sizes measure: "batch"
WHATIF_PREDICT_TO = "whatif-predict-to"  # the knob's value to predict
WHATIF_PREDICT_RUN = "whatif-predict-run"
WHATIF_PREDICT_JOB = "whatif-predict-job"  # {"run": the running prediction's job id, "command": its command line}
WHATIF_PREDICT_POLL = "whatif-predict-poll"
WHATIF_PREDICT_RESULT = "whatif-predict-result"  # progress, the predicted figures, or why there are none
WHATIF_PREDICT_LAWS = "whatif-predict-laws"  # the sites of most predicted bytes: law, bytes per recording, predicted
WHATIF_PREDICT_WARNINGS = "whatif-predict-warnings"  # how sure: the prediction's warnings, where it has any
WHATIF_PREDICT_FIGURE = "whatif-predict-figure"  # peak requested and reserved at each recorded size and predicted
WHATIF_PREDICT_COMMAND = "whatif-predict-command"  # <code>: the `fragviz predict` command line of the same prediction
