"""Fixtures every tier shares, and the tiers themselves: each test gets its markers here, not in its file.

- by folder: tests/unit -> unit, tests/integration -> integration, tests/fuzz -> integration and fuzz,
  tests/browser -> browser;
- postgres: a test on the PostgreSQL test server (the pg_url fixture, an "postgresql" parameter such as
  store_db's or an engine's, or a file of POSTGRES_FILES, whose module fixtures use the server);
- slow: a test in SLOW, the ones that took over 5 s in a serial run on the project's 2-core machine (kept by
  hand from `--durations=0`; a prefix names a whole file or all of a test's parameters).

In parallel (pytest-xdist, `-n 4 --dist loadfile` as .ci/run runs it) a file's tests go to one worker together,
so a fixture they share (a module's server, browser or store; the fuzz run's worker pool, session-wide) is built
once. (`--dist loadgroup` with xdist_group marks would spread the other files' tests one by one, but pytest-xdist
3.8 cannot group under pytest 9.2: pytest-dev/pytest-xdist#1386.)
"""
import os

import pytest

from tests.support.helpers import REAL, ROOT

TIERS = {"unit": ("unit",), "integration": ("integration",), "fuzz": ("integration", "fuzz"),
         "browser": ("browser",)}
POSTGRES_FILES = ("tests/integration/test_store_engines.py", "tests/integration/test_bench_jobs.py")
POSTGRES_FIXTURES = {"pg_url"}
# Over 5 s each in the serial `--durations=0` run (issue 23: 77 min on the 2-core machine while two other suites
# ran beside it, so about 1.5 s and more on a quiet one). A folder or a file where its tests share a costly
# module fixture, else the test (all its parameters).
SLOW = (
    "tests/browser/",  # a server and Chromium for each file: 61 of 74 tests over 5 s, the rest share them
    "tests/fuzz/",  # the fixed-seed fuzz run: 8 min
    "tests/integration/test_agent_door.py",
    "tests/integration/test_align_real.py",
    "tests/integration/test_bench_jobs.py",
    "tests/integration/test_cli.py",
    "tests/integration/test_crash.py",
    "tests/integration/test_doctor_cli_devices.py",
    "tests/integration/test_export.py",
    "tests/integration/test_ingest_paths.py",
    "tests/integration/test_jobs.py",
    "tests/integration/test_live.py",
    "tests/integration/test_lives_api.py",
    "tests/integration/test_lives_real.py",
    "tests/integration/test_memory_gate_example.py",
    "tests/integration/test_example_install.py",  # a fresh venv with torch, the example's install lines: 70 s
    "tests/integration/test_package_install.py",
    "tests/integration/test_parallel_replay.py",
    "tests/integration/test_prometheus.py",
    "tests/integration/test_pytest_plugin.py",
    "tests/integration/test_store.py",
    "tests/integration/test_store_engines.py",
    "tests/integration/test_usage_real.py",
    "tests/integration/test_web_door.py",
    "tests/integration/test_bounded_decode.py::test_a_memo_bomb_that_exhausts_both_unpicklers_is_one_line",
    "tests/integration/test_bounded_decode.py::"
    "test_a_json_parse_that_outgrows_its_estimate_ends_at_the_cap_in_one_line",
    "tests/integration/test_bounded_decode.py::"
    "test_real_snapshots_as_json_fit_the_estimate_and_hostile_shapes_do_not_exceed_it",
    "tests/integration/test_bounded_decode.py::test_a_file_of_empty_members_is_refused_in_one_line_within_the_deadline",
    "tests/integration/test_bounded_decode.py::test_many_members_are_fed_to_the_inflater_a_bounded_number_of_times",
    "tests/integration/test_bounded_decode.py::test_a_snapshot_through_a_pipe_ingests_and_reports",
    "tests/integration/test_capture_and_doctor.py::test_simulated_oom_raises_in_the_script_and_is_diagnosed",
    "tests/integration/test_plugin_invocations.py",  # 43 pytest runs of the example: 2 min
    "tests/integration/test_plugin_outputs.py",
    "tests/integration/test_output_targets.py::test_capture_writes_its_snapshot_to_each_kind_of_target",
    "tests/integration/test_capture_and_doctor.py::test_simulated_capture_records_storages_with_their_stacks",
    "tests/integration/test_doctor_summary_cli.py::test_with_a_snapshot_of_the_same_moment_and_of_another_device",
    "tests/integration/test_expandable_fidelity.py::test_simulate_follow_takes_the_device_size",
    "tests/integration/test_hostile_agents.py::"
    "test_the_dashboard_answers_an_attach_to_an_endless_agent_with_one_line_and_stays_small",
    "tests/integration/test_hostile_inputs.py::"
    "test_warnings_about_many_segments_are_collected_in_linear_time_and_capped",
    "tests/integration/test_hostile_inputs.py::"
    "test_a_small_gzip_that_inflates_to_gigabytes_is_refused_from_the_first_bytes",
    "tests/integration/test_hostile_inputs.py::test_a_trace_built_from_memo_references_is_refused",
    "tests/integration/test_hostile_inputs.py::test_the_events_limit_is_configurable",
    "tests/integration/test_hostile_inputs.py::test_a_busy_store_is_busy_not_a_bad_file",
    "tests/integration/test_hostile_inputs.py::test_a_lone_surrogate_in_a_frame_name_is_stored_and_shown",
    "tests/integration/test_hostile_inputs.py::test_gzip_with_a_second_member_is_read_as_the_format_says",
    "tests/integration/test_pools_cli.py::test_report_from_the_store_gives_the_same_pools",
    "tests/integration/test_run_dropin.py::test_fragviz_run_is_python_with_an_agent",
    "tests/integration/test_simulator_fidelity.py::test_simulate_command_json_shapes",
    # two programs recorded on the fly on a small device, beside a prediction
    "tests/integration/test_predict_shapes.py::"
    "test_the_safe_fit_of_affine_runs_without_running_out_of_memory_when_recorded",
)


# The files that take longest (the `--durations` of a 4-worker run), heaviest first: in parallel they start at
# once, so no long file begins near the end and leaves the other workers idle while it runs
FIRST = (
    "tests/fuzz/test_fuzz.py",
    "tests/integration/test_crash.py",
    "tests/integration/test_plugin_invocations.py",
    "tests/browser/test_live_page.py",
    "tests/browser/test_page_state.py",
    "tests/integration/test_cli.py",
    "tests/browser/test_library_compare_whatif.py",
    "tests/browser/test_dashboard.py",
    "tests/integration/test_jobs.py",
    "tests/integration/test_export.py",
    "tests/browser/test_usage_views.py",
    "tests/integration/test_live.py",
    "tests/integration/test_run_dropin.py",
    "tests/integration/test_lives_real.py",
    "tests/integration/test_memory_gate_example.py",
    "tests/integration/test_lives_api.py",
    "tests/browser/test_widths.py",
    "tests/integration/test_parallel_replay.py",
)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_start_rank)  # stable: the tests of a file keep their order
    for item in items:
        path = os.path.relpath(str(item.path), ROOT).replace(os.sep, "/")
        parts = path.split("/")
        for name in TIERS.get(parts[1] if len(parts) > 2 and parts[0] == "tests" else "", ()):
            item.add_marker(name)
        if _uses_postgres(item, path):
            item.add_marker("postgres")
        if _is_slow(item.nodeid):
            item.add_marker("slow")


def _start_rank(item) -> int:
    path = item.nodeid.split("::", 1)[0]
    return FIRST.index(path) if path in FIRST else len(FIRST)


def _is_slow(nodeid: str) -> bool:
    test = nodeid.split("[", 1)[0]  # every parameter of a test
    return any(test == entry or test.startswith(entry + "::") or (entry.endswith("/") and test.startswith(entry))
               for entry in SLOW)


def _uses_postgres(item, path: str) -> bool:
    if path in POSTGRES_FILES or POSTGRES_FIXTURES & set(item.fixturenames):
        return True
    params = getattr(item, "callspec", None)
    return params is not None and any(isinstance(v, str) and v == "postgresql" for v in params.params.values())


@pytest.fixture(scope="session")
def real_dir() -> str:
    if not os.path.isdir(REAL):
        pytest.fail(f"the real snapshots are missing: expected them in {REAL} (../shared beside the clone)")
    return REAL


@pytest.fixture
def pg_url():
    """A fresh database on the test PostgreSQL server (dropped afterwards)."""
    from tests.support.pg import drop_database, new_database

    url = new_database()
    yield url
    drop_database(url)


@pytest.fixture(params=("sqlite", "postgresql"))
def store_db(request, tmp_path):
    """A store for one test, on each engine in turn: a SQLite path or a PostgreSQL URL."""
    from tests.support.pg import drop_store_target, new_store_target

    target = new_store_target(request.param, tmp_path)
    yield target
    drop_store_target(target)
