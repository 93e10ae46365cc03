"""A memory budget on code written for a GPU (tinynet/gpu.py: `.to("cuda")`, autocast, a GradScaler). The same test
runs on a CPU runner: fragviz's plugin records it on its simulated CUDA device, where the batches generated on the
host do not count and the model, its optimizer state and each step's activations do.

Choose the device inside the test (tinynet.gpu.device()), not at import: the simulated device answers
torch.cuda.is_available() only while a budgeted test runs.
"""
import pytest
import torch

from tinynet.gpu import device, train_mixed_precision
from tinynet.model import TinyNet


@pytest.mark.memory_budget(peak="64MiB", growth="2%", device="48MiB")
def test_mixed_precision_training_memory():
    losses = train_mixed_precision(TinyNet())
    assert len(losses) == 4
    assert device().type == "cuda"  # on a GPU, or on the plugin's simulated one
    # the test's own view of its peak is the figure the budget judges
    assert torch.cuda.max_memory_allocated() < 48 * 2**20
