"""A job that runs out of device memory and retries with a smaller batch, as inference servers and auto batch-size
finders do: torch.cuda.OutOfMemoryError caught, the cache emptied, the batch halved."""
import json
import sys

import torch
from torch import nn


def forward_in_batches(model, data, batch):
    outputs = []
    for start in range(0, data.shape[0], batch):
        chunk = data[start:start + batch].to("cuda")
        outputs.append(model(chunk).cpu())
    return torch.cat(outputs)


def main(first_batch: int) -> dict:
    model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).cuda()
    data = torch.randn(first_batch, 1024)
    batch, failures = first_batch, []
    while True:
        try:
            with torch.no_grad():
                out = forward_in_batches(model, data, batch)
            break
        except torch.cuda.OutOfMemoryError as exc:
            failures.append({"batch": batch, "message": str(exc)})
            torch.cuda.empty_cache()
            batch //= 2
    return {"batch": batch, "failures": failures, "rows": out.shape[0], "out_device": str(out.device),
            "max_memory_allocated": torch.cuda.max_memory_allocated()}


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 4096)))
