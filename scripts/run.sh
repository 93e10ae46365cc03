#!/usr/bin/env bash
# The main job: set up, ingest the bundled samples into the embedded store, report on each, explain the OOM.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
DB=${FRAGVIZ_DB:-.fragviz/fragviz.sqlite}
.venv/bin/fragviz ingest sample_snapshots/*.pickle.gz --db "$DB"
for id in $(.venv/bin/python - "$DB" <<'PY'
import sys
from fragviz.store.reader import StoreReader
print(" ".join(str(r.id) for r in reversed(StoreReader(sys.argv[1]).list_snapshots())))
PY
); do
    echo
    .venv/bin/fragviz report "$id" --db "$DB"
done
echo
.venv/bin/fragviz doctor sample_snapshots/gpt_train_fragmentation_oom.pickle.gz
