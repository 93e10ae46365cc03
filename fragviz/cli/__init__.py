"""The `fragviz` command: ingest snapshots into the store and report on files or stored snapshots."""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from typing import Sequence

from fragviz import __version__
from fragviz.base.errors import FragvizError, UsageError
from fragviz.live.protocol import DEFAULT_RUN_PORT
from fragviz.base.settings import SETTINGS, db_path
from fragviz.base.units import cut


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Exit status: 0 done, 2 bad input or usage, 75 store busy (try again), 74 store not
    writable, 1 an internal error (a fragviz bug: one line, the traceback with --debug), 130 interrupted."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.run(args)
    except FragvizError as exc:
        print(f"fragviz: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("fragviz: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # noqa: BLE001  a bug: one line, the traceback only when asked for
        if getattr(args, "debug_errors", False):
            traceback.print_exc()
        print(f"fragviz: internal error ({type(exc).__name__}: {cut(str(exc))}); this is a fragviz bug, please "
              "report it" + ("" if getattr(args, "debug_errors", False) else " (--debug shows the traceback)"),
              file=sys.stderr)
        return 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fragviz", description="See and explain CUDA caching-allocator "
                                "fragmentation in PyTorch memory snapshots.")
    p.add_argument("--version", action="version", version=f"fragviz {__version__}")
    p.add_argument("--debug", dest="debug_errors", action="store_true",
                   help="show the traceback of an internal error")
    sub = p.add_subparsers(dest="command")
    db_help = f"{SETTINGS['db'].help} (default ${SETTINGS['db'].env} or {SETTINGS['db'].default})"

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
    ing.set_defaults(run=_cmd_ingest)

    rep = sub.add_parser("report", help="summarise a snapshot file or a stored snapshot")
    rep.add_argument("target", metavar="FILE_OR_ID")
    rep.add_argument("--db", help=db_help)
    rep.add_argument("--at", type=int, metavar="K", help="state after the first K trace events")
    rep.add_argument("--device", type=int, metavar="N", help="only this device")
    rep.add_argument("--json", action="store_true", help="print one JSON object")
    rep.set_defaults(run=_cmd_report)

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
    exp.set_defaults(run=_cmd_export)

    sim = sub.add_parser("simulate", help="replay a snapshot's trace through the allocator model")
    sim.add_argument("target", metavar="FILE_OR_ID")
    sim.add_argument("--db", help=db_help)
    sim.add_argument("--alloc-conf", metavar="CONF",
                     help="free-run under these PYTORCH_CUDA_ALLOC_CONF settings (and under the recorded ones)")
    sim.add_argument("--device-memory", metavar="SIZE", help="the device's memory, e.g. 80GiB: the device size for "
                     "free-run (default: what the trace's OOMs tell, else unlimited); in follow mode it bounds "
                     "expandable segments' reservations (1.125 x it)")
    sim.add_argument("--out", metavar="FILE", help="with --alloc-conf: write the simulated run as a snapshot")
    sim.add_argument("--json", action="store_true", help="print one JSON object")
    sim.set_defaults(run=_cmd_simulate)

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
    doc.set_defaults(run=_cmd_doctor)

    cap = sub.add_parser("capture", help="run a Python script and record its memory history as a snapshot",
                         description="fragviz capture [options] -- python script.py ARGS. On a CUDA machine "
                         "PyTorch records the history; without CUDA the script runs on the CPU and fragviz's "
                         "allocator model serves its tensors as on a CUDA device (the file says so).")
    cap.add_argument("--out", default="snapshot.pickle", help="snapshot file to write (.gz to compress)")
    _workload_arguments(cap)
    cap.set_defaults(run=_cmd_capture)

    run = sub.add_parser("run", help="run a Python script with the live agent serving its memory on a port",
                         description="fragviz run [options] -- python train.py ARGS. The agent serves /v1/stats, "
                         "/v1/snapshot, /v1/oom and /metrics; under torchrun each rank serves on PORT + LOCAL_RANK. "
                         "Without CUDA the script's CPU tensors are mirrored into a simulated CUDA device.")
    run.add_argument("--port", type=int, default=DEFAULT_RUN_PORT, help=f"port to serve on (default "
                     f"{DEFAULT_RUN_PORT}; 0: any free port)")
    run.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; any other needs a token)")
    run.add_argument("--token", help="token clients must send as Authorization: Bearer (default $FRAGVIZ_TOKEN)")
    run.add_argument("--max-entries", type=int, default=100_000, help="trace entries kept (a ring buffer)")
    run.add_argument("--linger", type=float, default=10.0, help="seconds to wait at exit for a poller to fetch "
                     "an OOM snapshot (default 10)")
    _workload_arguments(run)
    run.set_defaults(run=_cmd_run)

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
    att.set_defaults(run=_cmd_attach)

    lim = sub.add_parser("limits", help="print every setting and input limit, its value and where it came from",
                         description="Settings come from an option, $FRAGVIZ_<NAME>, fragviz.toml ($FRAGVIZ_CONFIG, "
                         "./fragviz.toml or ~/.config/fragviz/fragviz.toml), or the default, first match wins.")
    lim.add_argument("--json", action="store_true", help="print one JSON object")
    lim.set_defaults(run=_cmd_limits)

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
    srv.set_defaults(run=_cmd_serve)
    for name, command in sub.choices.items():  # `fragviz report X --debug` as well as `fragviz --debug report X`
        if name != "serve":  # serve's own --debug runs Flask's debugger
            command.add_argument("--debug", dest="debug_errors", action="store_true", default=argparse.SUPPRESS,
                                 help="show the traceback of an internal error")
    return p


def _workload_arguments(p: argparse.ArgumentParser) -> None:
    """What `capture` and `run` share: the simulated device, the allocator settings, the script."""
    p.add_argument("--device-memory", metavar="SIZE", help="simulated device size without CUDA (default 16GiB)")
    p.add_argument("--alloc-conf", metavar="CONF", help="PYTORCH_CUDA_ALLOC_CONF for the run")
    p.add_argument("--simulate", action="store_true", help="simulate even where CUDA is available")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- python script.py ARGS")


def _cmd_ingest(args: argparse.Namespace) -> int:
    from fragviz.store.engine import open_store, new_store_guard

    if args.job is not None:
        return _cmd_ingest_job(args)
    if args.workers is not None or args.rank is not None:
        raise UsageError("--workers and --rank go with --job")
    if args.name and len(args.files) > 1:
        raise UsageError("--name goes with one file")
    path = db_path(args.db)
    with new_store_guard(path) as guard:
        store = open_store(path)
        results = []
        for file in args.files:
            result = _ingest_one(store, file, args)
            results.append(result)
            if not args.json:
                _print_ingest_line(result, args.debug_errors)
        store.close()
        guard.keep = any(r.status == "ingested" for r in results)
    if args.json:
        print(json.dumps([r.as_dict() for r in results]))
    return _worst_status(r.status for r in results)


def _ingest_one(store, file: str, args: argparse.Namespace):
    """One file ingested, its progress drawn on the terminal and told to --progress-file and --timings."""
    from fragviz.library.ingest import ingest_file
    from fragviz.base.progress import PhaseClock, ProgressBar, ProgressLog

    bar = ProgressBar(os.path.basename(file)[:28], enabled=args.progress)
    log = ProgressLog(args.progress_file) if args.progress_file else None
    clock = PhaseClock()
    phases, updates, previews = [bar.set_phase, clock.phase], [bar.update], [lambda _: clock.picture()]
    if log is not None:
        phases.append(log.phase), updates.append(log.update), previews.append(log.preview)
    try:
        result = ingest_file(store, file, name=args.name or file, phase=lambda p: [f(p) for f in phases],
                             progress=lambda d, t: [f(d, t) for f in updates],
                             preview=lambda v: [f(v) for f in previews])
    finally:
        bar.close()
        if log is not None:
            log.close()
    if args.timings:
        print(f"{result.file}: {clock.summary()}", file=sys.stderr)
    return result


def _cmd_ingest_job(args: argparse.Namespace) -> int:
    """`fragviz ingest --job NAME DIR_OR_GLOB`: every rank in parallel processes (fragviz.jobs.run)."""
    from fragviz.library.ingest import clean_name
    from fragviz.jobs.run import ingest_job, record_job
    from fragviz.base.progress import ProgressBar
    from fragviz.store.engine import open_store, new_store_guard

    if args.name:
        raise UsageError("--name does not go with --job: each rank is stored under its file's path")
    name = clean_name(args.job) if args.job.strip() else None
    if not name:
        raise UsageError("--job needs a name")
    path = db_path(args.db)
    with new_store_guard(path) as guard:
        open_store(path).close()  # the store and its schema, before the workers open it
        bar = ProgressBar(f"job {name}"[:28], enabled=args.progress)
        results = ingest_job(path, args.files, args.rank, args.workers, bar)
        job_id = record_job(path, name, results)
        guard.keep = job_id is not None
    if args.json:
        print(json.dumps([r.as_dict() for r in results]))
    else:
        for r in results:
            if r.id is None and args.debug_errors and r.detail:
                print(r.detail, file=sys.stderr, end="")
            print(r.line() if r.id is not None else f"fragviz: {r.line()}", file=sys.stdout if r.id is not None
                  else sys.stderr)
        if job_id is not None:
            print(f"job {name} (id {job_id}): {sum(r.id is not None for r in results)} of {len(results)} ranks stored")
    return _worst_status(r.status for r in results)


def _worst_status(statuses) -> int:
    """The exit status of a batch: an internal error first, then bad input, then the store's troubles."""
    from fragviz.library.ingest import EXIT_STATUS

    codes = {EXIT_STATUS[s] for s in statuses}
    return next((c for c in (1, 2, 74, 75) if c in codes), 0)


def _print_ingest_line(result, debug: bool = False) -> None:
    if result.id is None:
        if debug and result.detail:
            print(result.detail, file=sys.stderr, end="")
        print(f"fragviz: {result.error}", file=sys.stderr)
    elif result.status == "unchanged":
        print(f"{result.file}: already in the store as snapshot {result.id} (unchanged)")
    else:
        print(f"{result.file}: ingested as snapshot {result.id}")


def _cmd_limits(args: argparse.Namespace) -> int:
    from fragviz.base.settings import config_path, describe, setting

    rows = describe()
    for name, *_ in rows:
        setting(name)  # a bad value is refused here, with where it came from
    if args.json:
        print(json.dumps({"config": config_path(), "settings": [
            {"name": n, "value": v, "from": o, "help": h} for n, v, o, h in rows]}))
        return 0
    width = max(len(n) for n, *_ in rows)
    for name, value, origin, help_text in rows:
        print(f"{name:<{width}}  {value:<14} {origin:<22} {help_text}")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from fragviz.library.export import ExportRequest, check_destination, save, snapshot_file_name, snapshot_frame
    from fragviz.library import Library

    check_destination(args.out, args.format)
    reader = Library.open(db_path(args.db))
    request = ExportRequest(args.what, args.device, args.at)
    frame = snapshot_frame(reader, args.id, request)
    where = save(frame, args.format, args.out or snapshot_file_name(reader, args.id, args.what, args.format),
                 sys.stdout)
    print(f"wrote {len(frame):,} rows ({args.what} of snapshot {args.id}, {args.format}) to {where}",
          file=sys.stderr if args.out == "-" else sys.stdout)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from fragviz.doctor.report import report_dict, report_text

    analysis = _analysis_for(args.target, args.db)
    if args.json:
        print(json.dumps(report_dict(analysis, args.at, args.device)))
    else:
        print(report_text(analysis, args.at, args.device))
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    from fragviz.simulate import follow, simulated_snapshot, what_if
    from fragviz.simulate.text import follow_text, what_if_text, with_certain_ooms
    from fragviz.simulate.whatif import NothingToSimulate, nothing_to_follow
    from fragviz.base.units import parse_size

    analysis = _analysis_for(args.target, args.db)
    memory = parse_size(args.device_memory) if args.device_memory else None
    if args.alloc_conf is None:
        if args.out:
            raise UsageError("--out goes with --alloc-conf (free-run)")
        # the device's size bounds expandable reservations; a single request larger than it is a certain OOM
        result = with_certain_ooms(analysis, follow(analysis, device_total=memory), memory)
        if not any(d["alloc_events"] for d in result["devices"]):
            raise NothingToSimulate(nothing_to_follow(analysis))
        print(json.dumps(result) if args.json else follow_text(analysis, result))
        return 0
    # refuses (NothingToSimulate) when no device has a workload
    result = with_certain_ooms(analysis, what_if(analysis, args.alloc_conf, memory))
    if args.out:
        import pickle

        with open(args.out, "wb") as fh:
            pickle.dump(simulated_snapshot(analysis, args.alloc_conf, memory), fh, protocol=4)
    print(json.dumps(result) if args.json else what_if_text(analysis, args.alloc_conf, result))
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    """`doctor`; with --json its refusals are JSON too (an object with an "error" field), on standard output."""
    try:
        return _doctor_summary(args) if args.summary is not None else _doctor(args)
    except FragvizError as exc:
        if not args.json:
            raise
        print(json.dumps({"error": str(exc), "exit_status": exc.exit_code}))
        return exc.exit_code


def _doctor(args: argparse.Namespace) -> int:
    from fragviz.doctor import PUBLIC_KEYS, diagnose, diagnose_message
    from fragviz.doctor.text import doctor_text

    if args.target is None and not args.message:
        raise UsageError("doctor needs a snapshot (FILE_OR_ID), --message TEXT or --summary FILE")
    if args.target is None:
        ooms = diagnose_message(args.message, job_pid=args.pid)
        source = "the message"
    else:
        analysis = _analysis_for(args.target, args.db)
        ooms = diagnose(analysis, args.message, simulate=not args.no_simulate, strict_device=True,
                        job_pid=args.pid)
        source = analysis.snapshot.source
    if args.message and not any(o.get("event") is None for o in ooms):
        raise UsageError("--message holds no CUDA out-of-memory message fragviz can read")
    if args.json:
        print(json.dumps({"ooms": [{k: o[k] for k in PUBLIC_KEYS} for o in ooms]}))
    else:
        print(doctor_text(source, ooms))
    return 0


def _doctor_summary(args: argparse.Namespace) -> int:
    """`doctor --summary FILE`: the table's findings, with the snapshot and the OOM message where given (an OOM
    message in the same text counts as --message)."""
    from fragviz.doctor import PUBLIC_KEYS, diagnose, diagnose_message
    from fragviz.doctor.message import find_messages
    from fragviz.doctor.summary import parse_summary, read_summary_text
    from fragviz.doctor.summary_checks import message_device
    from fragviz.doctor.summary_text import diagnose_summary, summary_text
    from fragviz.doctor.text import doctor_text

    text = read_summary_text(args.summary, sys.stdin.buffer)
    message = args.message or "\n".join(find_messages(text)) or None
    summary = parse_summary(text, "<stdin>" if args.summary == "-" else args.summary, message_device(message))
    analysis = _analysis_for(args.target, args.db) if args.target is not None else None
    ooms = diagnose(analysis, message, simulate=not args.no_simulate, strict_device=True, job_pid=args.pid) if (
        analysis is not None) else (diagnose_message(message, job_pid=args.pid) if message else [])
    if args.message and not any(o.get("event") is None for o in ooms):
        raise UsageError("--message holds no CUDA out-of-memory message fragviz can read")
    result = diagnose_summary(summary, analysis, message, ooms, text)
    if args.json:
        print(json.dumps({**result.as_dict(), "ooms": [{k: o[k] for k in PUBLIC_KEYS} for o in ooms]}))
    else:
        print(summary_text(result) + ("\n" + doctor_text(summary.source, ooms) if ooms else ""))
    return 0


def _cmd_capture(args: argparse.Namespace) -> int:
    import runpy

    from fragviz.live.runner import script_and_args

    command = script_and_args(list(args.command), "capture")
    if args.alloc_conf is not None:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = args.alloc_conf  # before CUDA initialises
    from fragviz.allocator.recorder import capture
    from fragviz.base.units import parse_size

    memory = parse_size(args.device_memory) if args.device_memory else None
    saved_argv = sys.argv
    sys.argv = command
    status = 0
    try:
        script = command[0]
        with capture(args.out, memory, args.alloc_conf, simulate=True if args.simulate else None, root_file=script):
            # The script's globals live on until the snapshot is taken, as a script's do until the interpreter
            # exits (run_path's module is a cycle: when the collector runs would otherwise decide).
            script_globals = runpy.run_path(script, run_name="__main__")  # noqa: F841
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:  # the workload's own failure (an OOM above all): the snapshot is still written
        print(f"fragviz: {command[0]} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
              file=sys.stderr)
        status = 1
    finally:
        sys.argv = saved_argv
    print(f"snapshot written to {args.out}", file=sys.stderr)
    return status


def _cmd_run(args: argparse.Namespace) -> int:
    from fragviz.live.runner import run_command
    from fragviz.base.units import parse_size

    memory = parse_size(args.device_memory) if args.device_memory else None
    token = args.token or os.environ.get("FRAGVIZ_TOKEN") or None
    return run_command(list(args.command), args.port, args.host, token, memory, args.alloc_conf,
                      True if args.simulate else None, args.max_entries, args.linger)


def _cmd_attach(args: argparse.Namespace) -> int:
    from fragviz.live.poller import attach_command
    from fragviz.base.units import parse_duration

    token = args.token or os.environ.get("FRAGVIZ_TOKEN") or None
    duration = parse_duration(args.duration) if args.duration else None
    return attach_command(db_path(args.db), args.targets, token, parse_duration(args.interval),
                          parse_duration(args.snapshot_every), duration)


def _cmd_serve(args: argparse.Namespace) -> int:
    from fragviz.live.protocol import fits_bearer, names_this_machine
    from fragviz.base.settings import setting
    from fragviz.ui.factory import create_app
    from fragviz.ui.guard import request_handler, serve

    token = args.token or os.environ.get("FRAGVIZ_TOKEN") or None
    if token is not None and not fits_bearer(token):
        raise UsageError("the token may hold only letters, digits and -._~+/ (with = at the end), so that it fits "
                         "an Authorization: Bearer header")
    if not names_this_machine(args.host) and not token:
        raise UsageError(f"refusing to serve on {args.host[:80]} without a token: other machines could read and "
                         "change this dashboard's store (pass --token or set FRAGVIZ_TOKEN, or bind 127.0.0.1)")
    read_timeout = float(setting("read_timeout"))
    app = create_app(db_path(args.db), token=token, samples=args.samples, host=args.host,
                     allowed_hosts=tuple(args.allowed_host))
    if args.debug:
        app.run(host=args.host, port=args.port, debug=True, threaded=True,
                request_handler=request_handler(read_timeout))
        return 0

    def ready(port: int) -> None:
        where = f"[{args.host}]" if ":" in args.host else args.host
        print(f"fragviz: serving http://{where}:{port}/ over {db_path(args.db)}", file=sys.stderr, flush=True)

    serve(app.server, args.host, args.port, read_timeout, ready)
    return 0


def _analysis_for(target: str, db: str | None):
    from fragviz.library.ingest import analyze_file

    if os.path.exists(target):
        return analyze_file(target)
    if target.isdigit():
        from fragviz.library import Library

        return Library.open(db_path(db)).load_analysis(int(target))
    raise UsageError(f"{target}: no such file, and not a snapshot id")


if __name__ == "__main__":
    sys.exit(main())
