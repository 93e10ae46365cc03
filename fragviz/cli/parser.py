"""The `fragviz` command line's parser: one function per subcommand, each naming the function that runs it."""
from __future__ import annotations

import argparse

from fragviz import __version__
from fragviz.base.settings import SETTINGS
from fragviz.cli.gate import cmd_gate
from fragviz.cli.explain import cmd_doctor, cmd_export, cmd_report, cmd_simulate
from fragviz.cli.ingest import cmd_ingest
from fragviz.cli.predict import add_predict
from fragviz.cli.serve import cmd_limits, cmd_serve
from fragviz.cli.run import DEBUG_HELP, add_run, workload_arguments
from fragviz.cli.workload import cmd_attach, cmd_capture


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fragviz", description="See and explain CUDA caching-allocator "
                                "fragmentation in PyTorch memory snapshots.")
    p.add_argument("--version", action="version", version=f"fragviz {__version__}")
    p.add_argument("--debug", dest="debug_errors", action="store_true",
                   help="show the traceback of an internal error")
    sub = p.add_subparsers(dest="command")
    db_help = f"{SETTINGS['db'].help} (default ${SETTINGS['db'].env} or {SETTINGS['db'].default})"
    _add_ingest(sub, db_help)
    _add_report(sub, db_help)
    _add_export(sub, db_help)
    _add_simulate(sub, db_help)
    _add_doctor(sub, db_help)
    _add_gate(sub, db_help)
    add_predict(sub, db_help)
    _add_capture(sub)
    add_run(sub)
    _add_attach(sub, db_help)
    _add_limits(sub)
    _add_serve(sub, db_help)
    for name, command in sub.choices.items():  # `fragviz report X --debug` as well as `fragviz --debug report X`
        if name != "serve":  # serve's own --debug runs Flask's debugger
            command.add_argument("--debug", dest="debug_errors", action="store_true", default=argparse.SUPPRESS,
                                 help=DEBUG_HELP)
    return p


def _add_ingest(sub: argparse._SubParsersAction, db_help: str) -> None:
    ing = sub.add_parser("ingest", help="ingest snapshot files into the store")
    ing.add_argument("files", nargs="+", metavar="FILE")
    ing.add_argument("--db", help=db_help)
    ing.add_argument("--json", action="store_true", help="print one JSON list of results")
    ing.add_argument("--name", help="store the file under this name (one file only; default: its path)")
    ing.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                     help="draw a progress bar (default: when stderr is a terminal)")
    ing.add_argument("--job", metavar="NAME", help="ingest the ranks of one training job: FILE is a directory, a "
                     "quoted glob or files; each file's rank from its name (rank3, rank_3, _3.pickle), else from the "
                     "snapshot (user metadata, its single device); added to the job NAME (a rank given again is "
                     "replaced)")
    ing.add_argument("--workers", type=int, metavar="N", help="with --job: worker processes (default: one per file, "
                     "at most one per CPU)")
    ing.add_argument("--rank", type=int, metavar="N", help="with --job and a single file: its rank")
    ing.add_argument("--timings", action="store_true", help="print where each file's time went (read, decode, "
                     "parse, replay, store) and when its first picture was ready, on stderr")
    ing.add_argument("--progress-file", metavar="PATH", help="append the ingest's progress as JSON lines to PATH "
                     "(phases, events replayed, the first picture): how the dashboard follows an upload")
    ing.set_defaults(run=cmd_ingest)


def _add_report(sub: argparse._SubParsersAction, db_help: str) -> None:
    rep = sub.add_parser("report", help="summarise a snapshot file or a stored snapshot")
    rep.add_argument("target", metavar="FILE_OR_ID")
    rep.add_argument("--db", help=db_help)
    rep.add_argument("--at", type=int, metavar="K", help="state after the first K trace events")
    rep.add_argument("--device", type=int, metavar="N", help="only this device")
    rep.add_argument("--json", action="store_true", help="print one JSON object")
    rep.set_defaults(run=cmd_report)


def _add_export(sub: argparse._SubParsersAction, db_help: str) -> None:
    exp = sub.add_parser("export", help="write a stored snapshot's series, allocations or segments as Parquet or CSV")
    exp.add_argument("id", type=int, metavar="ID")
    exp.add_argument("--db", help=db_help)
    # the choices are fragviz.library.export's WHATS and FORMATS (not imported here: pandas is slow to load)
    exp.add_argument("--format", required=True, choices=("parquet", "csv"))
    exp.add_argument("--what", default="series", choices=("series", "allocations", "segments"),
                     help="figures after every event (default), every allocation of the trace, or the blocks "
                     "of one state")
    exp.add_argument("--device", type=int, metavar="D", help="only this device (default: every one)")
    exp.add_argument("--at", type=int, metavar="EVENT", help="segments: the state after EVENT events (default: the "
                     "final recorded state)")
    exp.add_argument("-o", "--out", metavar="PATH", help="file to write (default: <snapshot>-<id>-<what>.<format> "
                     "here); - writes CSV to standard output")
    exp.set_defaults(run=cmd_export)


def _add_simulate(sub: argparse._SubParsersAction, db_help: str) -> None:
    sim = sub.add_parser("simulate", help="replay a snapshot's trace through the allocator model")
    sim.add_argument("target", metavar="FILE_OR_ID")
    sim.add_argument("--db", help=db_help)
    sim.add_argument("--alloc-conf", metavar="CONF",
                     help="free-run under these PYTORCH_CUDA_ALLOC_CONF settings (and under the recorded ones)")
    sim.add_argument("--device-memory", metavar="SIZE", help="the device's memory, e.g. 80GiB: the device size for "
                     "free-run (default: what the trace's OOMs tell, else unlimited); in follow mode it bounds "
                     "expandable segments' reservations (1.125 x it)")
    sim.add_argument("--scale", action="append", default=[], metavar="TARGET=FACTOR",
                     help="code what-if: the allocations of a kind (activations, kv_cache, ...) or a site (text of a "
                     "frame: file.py:LINE or file.py:function) at FACTOR times their size; repeatable")
    sim.add_argument("--bucket", action="append", default=[], metavar="TARGET:K",
                     help="code what-if: each site of TARGET pads its sizes up to K steps between its smallest and "
                     "largest (as padding sequence lengths to K buckets would); repeatable")
    sim.add_argument("--paged-kv", metavar="[TARGET=]SIZE", help="code what-if: the KV cache (or TARGET's "
                     "allocations) served from fixed pages of SIZE, as vLLM does, e.g. 2MiB")
    sim.add_argument("--out", metavar="FILE", help="with a free-run (--alloc-conf or a code what-if): write the "
                     "simulated run as a snapshot")
    sim.add_argument("--json", action="store_true", help="print one JSON object")
    sim.set_defaults(run=cmd_simulate)


def _add_doctor(sub: argparse._SubParsersAction, db_help: str) -> None:
    doc = sub.add_parser("doctor", help="explain each CUDA out-of-memory error: verdict, numbers, what to do")
    doc.add_argument("target", metavar="FILE_OR_ID", nargs="?")
    doc.add_argument("--db", help=db_help)
    doc.add_argument("--message", metavar="TEXT", help="an OOM message as PyTorch printed it (any era); with a "
                     "snapshot, its end state adds the largest free block")
    doc.add_argument("--summary", metavar="FILE", help="a torch.cuda.memory_summary() table as printed or pasted "
                     "from a log (- reads standard input); read with the snapshot and --message where given")
    doc.add_argument("--pid", type=int, metavar="PID", help="the job's own process id: a message's \"Process PID has "
                     "...\" entry is then the job itself, never one of the other processes to stop")
    doc.add_argument("--no-simulate", action="store_true", help="skip the what-if simulations")
    doc.add_argument("--json", action="store_true", help="print one JSON object (a refusal too: {\"error\": ...})")
    doc.set_defaults(run=cmd_doctor)


def _add_gate(sub: argparse._SubParsersAction, db_help: str) -> None:
    gate = sub.add_parser("gate", help="fail a CI run whose memory breaks a budget or grew over its baseline",
                          description="Checks each budget given on CANDIDATE (against BASELINE where given) and names "
                          "the allocation sites whose memory at the peak grew most. CANDIDATE and BASELINE are snapshot "
                          "files, store ids, or memory summaries (JSON) that --write-summary or the pytest plugin wrote. "
                          "Exit status: 0 every budget holds, 1 one fails, 2 the gate cannot judge (the reason is "
                          "printed). With $GITHUB_STEP_SUMMARY set, the Markdown report is appended to it.")
    gate.add_argument("candidate", metavar="CANDIDATE")
    gate.add_argument("--baseline", metavar="BASELINE", help="the run to compare with (file, store id or summary)")
    gate.add_argument("--max-peak-reserved", metavar="SIZE", help="most bytes reserved at the peak, e.g. 2GiB")
    gate.add_argument("--max-peak-allocated", metavar="SIZE", help="most bytes allocated at the peak")
    gate.add_argument("--max-growth", metavar="PCT", help="how much each peak (reserved, allocated) may grow over the "
                      "baseline's, e.g. 5%%")
    gate.add_argument("--max-fragmentation", metavar="RATIO", help="most fragmentation (non-releasable / reserved) "
                      "at the reserved peak, e.g. 0.3 or 30%%")
    gate.add_argument("--device-memory", metavar="SIZE", help="simulate the candidate's trace on a device of this "
                      "size: fails if it would run out of memory there")
    gate.add_argument("--alloc-conf", metavar="CONF", help="with --device-memory: the PYTORCH_CUDA_ALLOC_CONF to "
                      "simulate (default: the recorded settings)")
    gate.add_argument("--db", help=db_help)
    gate.add_argument("--junit", metavar="FILE", help="write the verdict as JUnit XML")
    gate.add_argument("--markdown", metavar="FILE", help="write the verdict as Markdown (a pull request's summary)")
    gate.add_argument("--write-summary", metavar="FILE", help="write the candidate's memory summary (small JSON, a "
                      "baseline to commit)")
    gate.add_argument("--json", action="store_true", help="print one JSON object: passed, checks, sites")
    gate.set_defaults(run=cmd_gate)


def _add_capture(sub: argparse._SubParsersAction) -> None:
    cap = sub.add_parser("capture", help="run a Python script and record its memory history as a snapshot",
                         description="fragviz capture [options] -- python script.py ARGS. On a CUDA machine "
                         "PyTorch records the history; without CUDA the script runs on the CPU and fragviz's "
                         "allocator model serves its tensors as on a CUDA device (the file says so).")
    cap.add_argument("--out", default="snapshot.pickle", help="snapshot file to write (.gz to compress)")
    workload_arguments(cap)
    cap.set_defaults(run=cmd_capture)


def _add_attach(sub: argparse._SubParsersAction, db_help: str) -> None:
    att = sub.add_parser("attach", help="record running jobs' live agents into the store",
                         description="Polls each HOST:PORT (one per rank), records every poll as a live series, "
                         "takes periodic snapshots and the OOM snapshot into the library; reconnects when an agent "
                         "goes away; stops on Ctrl-C or after --duration.")
    att.add_argument("targets", nargs="+", metavar="HOST:PORT")
    att.add_argument("--token", help="the agents' token (default $FRAGVIZ_TOKEN)")
    att.add_argument("--db", help=db_help)
    att.add_argument("--interval", default="1s", help="time between polls (default 1s)")
    att.add_argument("--snapshot-every", default="5m", help="time between full snapshots with their trace (default "
                     "5m; each costs the job the time to copy its allocator's state)")
    att.add_argument("--duration", help="stop after this long (default: until Ctrl-C)")
    att.set_defaults(run=cmd_attach)


def _add_limits(sub: argparse._SubParsersAction) -> None:
    lim = sub.add_parser("limits", help="print every setting and input limit, its value and where it came from",
                         description="Settings come from an option, $FRAGVIZ_<NAME>, fragviz.toml ($FRAGVIZ_CONFIG, "
                         "./fragviz.toml or ~/.config/fragviz/fragviz.toml), or the default, first match wins.")
    lim.add_argument("--json", action="store_true", help="print one JSON object")
    lim.set_defaults(run=cmd_limits)


def _add_serve(sub: argparse._SubParsersAction, db_help: str) -> None:
    srv = sub.add_parser("serve", help="serve the dashboard (and its HTTP API) over a store")
    srv.add_argument("--db", help=db_help)
    srv.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only; "
                     "any address but loopback needs a token)")
    srv.add_argument("--port", type=int, default=8050)
    srv.add_argument("--token", help="access token for the pages and the API (default $FRAGVIZ_TOKEN): send it as "
                     "Authorization: Bearer TOKEN, or open any page once as ?token=TOKEN")
    srv.add_argument("--allowed-host", action="append", default=[], metavar="NAME[:PORT]",
                     help="a name clients reach a non-loopback server by (its Host header); repeatable")
    srv.add_argument("--samples", metavar="DIR", help="ingest these *.pickle.gz into an empty store on start")
    srv.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    srv.set_defaults(run=cmd_serve)
