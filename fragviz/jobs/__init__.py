"""Jobs: the snapshots of a training job's ranks, ingested together and compared across ranks.

`ranks` tells each file's rank, `run` ingests them in parallel worker processes and records the job, `table`
and `stats` work out the per-rank figures, their imbalance and outliers from the stored summaries.
"""
