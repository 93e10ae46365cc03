"""A job's ranks: read from file names and user metadata, two files of one rank refused; the imbalance and
outlier rule on hand-worked numbers; the per-rank rows built from stored summaries."""
from __future__ import annotations

import pytest

from fragviz.base.errors import UsageError
from fragviz.jobs.ranks import RankedFile, rank_from_metadata, rank_from_name, refuse_shared_ranks
from fragviz.jobs.stats import FLAT_MARGIN, MAD_SCALE, OUTLIER_Z, imbalance, mad, outliers
from fragviz.jobs.table import job_figures, ranks_csv
from fragviz.store.records import DeviceSummary, Job, JobRank, Summary


@pytest.mark.parametrize("name, rank", [
    ("rank0.pickle", 0), ("rank3.pickle.gz", 3), ("rank_3.pickle", 3), ("rank-3.pkl", 3), ("rank03.pickle", 3),
    ("trainer_rank_1.pickle.gz", 1), ("RANK12.json", 12), ("snap_rank7_step_100.pickle", 7),
    ("dump_2.pickle", 2), ("memory-3.pickle.gz", 3), ("snapshot_15.pkl.gz", 15), ("/runs/job/rank4/rank_5.pickle", 5),
])
def test_a_rank_in_the_file_name(name, rank):
    assert rank_from_name(name) == rank


@pytest.mark.parametrize("name", ["gpt_train.pickle.gz", "cranky3.pickle", "snapshot.pickle", "/runs/rank4/x.pickle",
                                  "model2.pickle"])
def test_no_rank_in_the_file_name(name):
    assert rank_from_name(name) is None


@pytest.mark.parametrize("strings, rank", [
    (["rank=5"], 5), (["step 3, rank: 5"], 5), (['{"rank": 5, "step": 9}'], 5), (["{'rank': 5}"], 5),
    (["rank=5", "rank=5 step=2"], 5), (["rank=5", "rank=6"], None), (["local_rank=1"], None), (["step=4"], None),
    ([], None),
])
def test_a_rank_in_the_user_metadata(strings, rank):
    assert rank_from_metadata(strings) == rank


def test_two_files_of_one_rank_are_refused_naming_both():
    files = [RankedFile("a/rank1.pickle", 1, "name"), RankedFile("a/dump_2.pickle", 2, "name"),
             RankedFile("a/other_1.pickle", 1, "name")]
    with pytest.raises(UsageError) as err:
        refuse_shared_ranks(files)
    message = str(err.value)
    assert "a/rank1.pickle" in message and "a/other_1.pickle" in message and "\n" not in message
    refuse_shared_ranks(files[:2] + [RankedFile("a/x.pickle", None, "why not")])  # ranks unknown do not clash


def test_mad_and_outliers_by_hand():
    values = [10, 11, 12, 13, 14, 100]
    # median 12.5; |x - 12.5|: 2.5 1.5 0.5 0.5 1.5 87.5 -> median 1.5; cut 3.5 x 1.4826 x 1.5 = 7.78
    assert mad(values) == 1.5
    assert outliers(values) == [False] * 5 + [True]
    # a low outlier: median 100, deviations 0 0 0 1 1 50 -> MAD 0.5, cut 2.59
    assert outliers([100, 100, 101, 99, 100, 50]) == [False] * 5 + [True]
    assert OUTLIER_Z * MAD_SCALE * 0.5 == pytest.approx(2.59455)


def test_outliers_when_most_ranks_are_equal():
    assert mad([8, 8, 8, 8, 9]) == 0
    assert outliers([8, 8, 8, 8, 9]) == [False] * 4 + [True]  # 12.5 % above the median
    assert outliers([8, 8, 8, 8, 8.7]) == [False] * 5  # 8.75 %: within FLAT_MARGIN
    assert outliers([10, 10, 10, 10, 10 * (1 + FLAT_MARGIN)]) == [False] * 5  # exactly at the margin: not beyond it
    assert outliers([5, 9]) == [False, False] and outliers([]) == []


def test_imbalance_is_max_over_median():
    assert imbalance([2, 4, 6, 8]) == 8 / 5
    assert imbalance([3, 3, 3]) == 1.0
    assert imbalance([0, 0, 5]) is None and imbalance([]) is None


def device(d: int, reserved: int, requested: int, frag: float | None = 0.25, ooms: int = 0,
           verdicts: tuple[str, ...] | None = ()) -> DeviceSummary:
    return DeviceSummary(d, 10, {"alloc": 5, **({"oom": ooms} if ooms else {})}, 0, 0, 0, 0, 0, 0.0, 0, 0,
                         reserved, requested, 3 if frag is not None else None, frag, verdicts)


def test_rows_per_rank_and_device_from_summaries():
    GiB = 2**30
    job = Job(7, "J", "2025-01-01T00:00:00", tuple(JobRank(r, 100 + r, f"rank{r}.pickle") for r in range(6)))
    summaries = {100 + r: Summary((device(0, 10 * GiB + r, 8 * GiB),)) for r in range(4)}
    summaries[104] = Summary((device(0, 40 * GiB, 30 * GiB, ooms=2, verdicts=("fragmentation", "exhaustion")),))
    summaries[105] = Summary((device(0, 10 * GiB, 8 * GiB, frag=None, ooms=1, verdicts=None),
                              device(1, 10 * GiB + 2, 8 * GiB)), 0)
    figures = job_figures(job, summaries)
    assert [(r.rank, r.device) for r in figures.rows] == [(0, 0), (1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (5, 1)]
    assert [r.rank for r in figures.rows if r.outlier] == [4]
    # peak reserved: median of 10G, 10G+1, 10G+2, 10G+3, 40G, 10G, 10G+2 is 10G+2
    assert figures.reserved_imbalance == pytest.approx(40 * GiB / (10 * GiB + 2))
    assert figures.requested_imbalance == pytest.approx(30 / 8)
    assert figures.largest().rank == 4 and figures.median_row().peak_reserved_bytes == 10 * GiB + 2
    assert figures.worst_oom().rank == 4
    assert figures.label(figures.rows[-1]) == "rank 5 cuda:1" and figures.label(figures.rows[0]) == "rank 0"
    lines = ranks_csv(figures).splitlines()
    assert lines[0].startswith("rank,device,snapshot_id") and len(lines) == 8
    assert lines[6].split(",")[6:9] == ["", "1", ""]  # fragmentation and verdicts not recorded: empty cells


def test_a_rank_without_its_snapshot_summary_is_a_row_of_nothing_recorded():
    job = Job(1, "J", "2025-01-01T00:00:00", (JobRank(0, 5, "a"), JobRank(1, 6, "b")))
    figures = job_figures(job, {5: Summary((device(0, 100, 50),)), 6: Summary(())})
    assert figures.rows[1].device is None and figures.rows[1].peak_reserved_bytes is None
    assert figures.reserved_imbalance == 1.0 and figures.worst_oom() is None
