"""`fragviz serve` and `fragviz limits`: the dashboard over a store, and the settings in force."""
from __future__ import annotations

import argparse
import json
import os
import sys

from fragviz.base.errors import UsageError
from fragviz.base.settings import db_path


def cmd_serve(args: argparse.Namespace) -> int:
    from fragviz.live.protocol import fits_bearer, names_this_machine
    from fragviz.base.settings import setting
    from fragviz.ui.factory import create_app
    from fragviz.ui.http.guard import request_handler, serve

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


def cmd_limits(args: argparse.Namespace) -> int:
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
