"""Modules the tests share (imported as `tests.support.X`, never through sys.path): snapshot builders, a free
port and a bounded wait (helpers), the dashboard in a subprocess (server), the PostgreSQL test server (pg),
and hand-built traces (annotated_trace, step_traces, expandable_traces)."""
