"""`python -m fragviz`: the same as the `fragviz` command."""
import sys

from fragviz.cli import main

sys.exit(main())
