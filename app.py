"""fragviz's dashboard: `python app.py` serves it on http://127.0.0.1:8050 over the embedded store.

The composition root: the store path, the access token and the bundled samples are read here and handed
to fragviz.ui.factory.create_app. `fragviz serve` does the same with flags.
"""
from __future__ import annotations

import os
import sys

from fragviz.cli import main as cli_main

SAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sample_snapshots")

if __name__ == "__main__":
    sys.exit(cli_main(["serve", "--samples", SAMPLES, *sys.argv[1:]]))
