"""fragviz.base.cells: OWASP's rule for CSV cells, worked out by hand."""
import pytest

from fragviz.base.cells import spreadsheet_text
from fragviz.jobs.table import ranks_csv


@pytest.mark.parametrize("value, cell", [
    ("=1+1", "'=1+1"), ("+1", "'+1"), ("-1", "'-1"), ("@SUM(A1)", "'@SUM(A1)"), ("\t=1", "'\t=1"),
    ("\r=1", "'\r=1"), ("\uff1d1", "'\uff1d1"), ("train.py:10 forward", "train.py:10 forward"), ("", ""),
    ("a=1", "a=1"), ("'=1", "'=1"),
])
def test_a_cell_a_spreadsheet_would_evaluate_gets_a_leading_quote(value, cell):
    assert spreadsheet_text(value) == cell


def test_the_ranks_csv_quotes_a_snapshot_name_that_is_a_formula():
    from fragviz.jobs.table import job_figures
    from fragviz.store.records import DeviceSummary, Job, JobRank, Summary

    job = Job(1, "J", "2025-01-01T00:00:00", (JobRank(0, 5, '=HYPERLINK("http://evil")'),))
    summary = Summary((DeviceSummary(0, 10, {"alloc": 5}, 0, 0, 0, 0, 0, 0.0, 0, 0, 1 << 30, 1 << 29, 3, 0.1, ()),))
    text = ranks_csv(job_figures(job, {5: summary}))
    assert ',"\'=HYPERLINK(""http://evil"")",' in text and "\n=" not in text and ",=" not in text
