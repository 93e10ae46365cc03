"""Memory budgets: a run's memory judged against budgets and a baseline, so that CI fails the change that makes
memory worse.

- `figures`: a run's figures per device (peaks, fragmentation at the reserved peak, sites), the small JSON summary;
- `sites`: an allocation site, the exact line of its first user frame, and a candidate's sites matched to its
  baseline's (the code of the line, its function, the nearest line);
- `budgets`: the limits as users write them, and the `fragviz gate` command line that checks them;
- `judge`: the checks, the grown sites, the device-size simulation, the verdict (passed, failed, cannot judge);
- `report`: the verdict as text, Markdown and JUnit XML;
- `inputs`: a side of a gate read from a snapshot file, a store id or a summary;
- `record`: a block of code's allocations recorded (CUDA, or fragviz's simulated device on a CPU);
- `pytest_plugin`: budgets on tests (a `pytest11` entry point); `pytest_setup`: what it checks before any test runs.
"""
