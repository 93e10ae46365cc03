"""Memory budgets on the training and evaluation steps (fragviz's pytest plugin).

The budgets hold the peaks to their baselines in memory_baselines/ (2 % growth at most) and below absolute
ceilings; `device` simulates the recorded trace on a device of that size. After a change that is meant to use more
memory, write new baselines with `pytest --memory-update-baseline` and commit them.
"""
import pytest

from tinynet.model import TinyNet
from tinynet.train import evaluate, train


@pytest.mark.memory_budget(peak="64MiB", growth="2%", device="48MiB")
def test_train_memory():
    losses = train(TinyNet())
    assert len(losses) == 8


@pytest.mark.memory_budget(peak_allocated="16MiB", growth="2%")
def test_evaluate_memory():
    assert 0.0 <= evaluate(TinyNet()) <= 1.0


def test_evaluate_on_its_own_budget(memory_budget):
    memory_budget.limit(peak="32MiB", fragmentation="0.9")
    evaluate(TinyNet(), steps=2)
