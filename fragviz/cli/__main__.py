"""`python -m fragviz.cli`: the same as the `fragviz` command (tests, benches and scripts start it so)."""
import sys

from fragviz.cli import main

sys.exit(main())
