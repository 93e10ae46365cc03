"""CUDA code on a CPU (fragviz.allocator.cudasim, cudaapi, tensor_moves): where each tensor is, what torch.cuda
answers, and that everything is put back afterwards. Real torch, in this process."""
from __future__ import annotations

import io

import pytest
import torch

from fragviz.allocator.cudasim import cuda_on_cpu
from fragviz.allocator.recorder import CUDA_TENSORS, EVERY_TENSOR, SimulatedDevice

MiB = 1024**2


@pytest.fixture
def device():
    return SimulatedDevice(64 * MiB, "", record=True)


def on(device: SimulatedDevice, t: torch.Tensor) -> bool:
    return device.holds(t.untyped_storage())


def test_until_the_code_names_cuda_every_tensor_counts_then_only_the_gpus(device):
    with cuda_on_cpu(device):
        host = torch.empty(MiB, dtype=torch.uint8)
        assert device.placement == EVERY_TENSOR and torch.cuda.memory_allocated() == MiB
        moved = host.cuda()
        assert device.placement == CUDA_TENSORS
        assert torch.cuda.memory_allocated() == MiB  # the copy on the device; the host tensor no longer counts
        assert on(device, moved) and not on(device, host)
        assert moved.is_cuda and moved.device == torch.device("cuda", 0) and moved.get_device() == 0
        assert not host.is_cuda and host.device.type == "cpu" and host.get_device() == -1



def offsets_like(x: torch.Tensor) -> torch.Tensor:
    """Written as torch's own Python functions are (F.embedding_bag makes its offsets so): overridable, and making a
    tensor from nothing on its input's device."""
    if torch.overrides.has_torch_function((x,)):
        return torch.overrides.handle_torch_function(offsets_like, (x,), x)
    return torch.arange(0, x.numel(), x.size(1), device=x.device)


def test_tensors_made_inside_torchs_own_python_functions_go_where_their_inputs_are(device):
    with cuda_on_cpu(device):
        # the body runs with the function mode off: x.device reads "cpu" there, and yet what it makes is on the GPU
        assert on(device, offsets_like(torch.ones(4, 3, device="cuda")))
        assert not on(device, offsets_like(torch.ones(4, 3)))
        bags = torch.nn.functional.embedding_bag(torch.zeros(4, 3, dtype=torch.long, device="cuda"),
                                                 torch.randn(10, 8, device="cuda"))
        assert on(device, bags) and bags.is_cuda


def test_every_form_of_to_and_the_moves_back(device):
    with cuda_on_cpu(device):
        x = torch.ones(4, 4, device="cuda")
        assert x.cuda() is x and x.to("cuda") is x and x.to(torch.device("cuda:0")) is x
        assert on(device, x.to(torch.float64)) and x.to(torch.float64).dtype == torch.float64
        assert on(device, x.to("cuda", torch.float16)) and on(device, x.to(device="cuda", dtype=torch.float16))
        host = torch.zeros(4, 4)
        assert on(device, host.to(x)) and on(device, host.to(0)) and on(device, host.to(device=x.device))
        back = x.cpu()
        assert not on(device, back) and back.device.type == "cpu" and back.data_ptr() != x.data_ptr()
        assert not on(device, x.to("cpu")) and x.to("cpu", copy=False) is not x
        assert not on(device, host.to(torch.float64)) and host.to("cpu") is host


def test_what_operators_make_is_where_their_inputs_are(device):
    with cuda_on_cpu(device):
        x = torch.randn(8, 8, device="cuda")
        assert on(device, x @ x) and on(device, torch.empty_like(x)) and on(device, x.new_zeros(3))
        assert on(device, torch.arange(5, device=x.device))
        assert not on(device, torch.empty_like(x, device="cpu")) and not on(device, torch.arange(5))
        host = torch.zeros(8, 8)
        host.copy_(x)  # an in-place copy into a host tensor leaves it on the host
        assert not on(device, host)
        y = x.view(64)  # a view shares its storage: counted once
        allocated = torch.cuda.memory_allocated()
        assert on(device, y) and torch.cuda.memory_allocated() == allocated


def test_a_default_device_of_cuda_places_what_constructors_make(device):
    with cuda_on_cpu(device):
        with torch.device("cuda"):
            a = torch.zeros(1000)
        assert on(device, a) and not on(device, torch.zeros(10))
        torch.set_default_device("cuda")
        try:
            b = torch.ones(100)
            layer = torch.nn.Linear(4, 4)
        finally:
            torch.set_default_device(None)
        assert on(device, b) and on(device, layer.weight) and b.device == torch.device("cuda", 0)
        assert not on(device, torch.ones(3))


def test_pinned_memory_is_a_host_copy_and_a_gpu_tensor_cannot_be_pinned(device):
    with cuda_on_cpu(device):
        x = torch.ones(16, device="cuda")
        host = torch.ones(16)
        pinned = host.pin_memory()
        assert not on(device, pinned) and pinned.data_ptr() != host.data_ptr()
        with pytest.raises(RuntimeError, match="cannot pin 'torch.cuda.FloatTensor' only dense CPU tensors"):
            x.pin_memory()


def test_memory_figures_are_the_simulated_allocators(device):
    with cuda_on_cpu(device):
        a = torch.empty(MiB, dtype=torch.uint8, device="cuda")
        b = torch.empty(3 * MiB, dtype=torch.uint8, device="cuda")
        del b
        assert torch.cuda.memory_allocated() == MiB and torch.cuda.max_memory_allocated() == 4 * MiB
        # 1 MiB is a small request (a 2 MiB segment); 3 MiB a large one, in a 20 MiB segment kept cached
        assert torch.cuda.memory_reserved() == 22 * MiB
        stats = torch.cuda.memory_stats()
        assert stats["allocated_bytes.all.peak"] == 4 * MiB and stats["reserved_bytes.all.current"] == 22 * MiB
        torch.cuda.reset_peak_memory_stats()
        assert torch.cuda.max_memory_allocated() == MiB
        assert torch.cuda.mem_get_info() == (42 * MiB, 64 * MiB)
        assert torch.cuda.get_device_properties(0).total_memory == 64 * MiB
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1 and torch.cuda.current_device() == 0
        del a
        torch.cuda.empty_cache()
        assert torch.cuda.memory_reserved() == 0


def test_the_simulated_limit_raises_pytorchs_out_of_memory_error_and_a_memory_fraction_lowers_it(device):
    with cuda_on_cpu(device):
        keep = torch.empty(40 * MiB, dtype=torch.uint8, device="cuda")
        with pytest.raises(torch.cuda.OutOfMemoryError, match=r"^CUDA out of memory\. Tried to allocate 30\.00 MiB"):
            torch.empty(30 * MiB, dtype=torch.uint8, device="cuda")
        del keep
        torch.cuda.empty_cache()
        torch.cuda.set_per_process_memory_fraction(0.25)  # 16 MiB of 64
        with pytest.raises(torch.cuda.OutOfMemoryError):
            torch.empty(30 * MiB, dtype=torch.uint8, device="cuda")


def test_streams_keep_their_blocks_apart_and_events_time_on_the_host(device):
    with cuda_on_cpu(device):
        side = torch.cuda.Stream()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.cuda.stream(side):
            assert torch.cuda.current_stream() == side
            on_side = torch.empty(1024, device="cuda")
        torch.cuda.current_stream().wait_stream(side)
        on_side.record_stream(torch.cuda.current_stream())
        end.record()
        torch.cuda.synchronize()
        assert start.elapsed_time(end) >= 0 and torch.cuda.current_stream() == torch.cuda.default_stream()
        snapshot = torch.cuda.memory._snapshot()
    streams = {s["stream"] for s in snapshot["segments"]}
    assert streams == {side.stream_id}  # the block was made on the side stream, in a segment of its own


def test_torch_load_places_what_was_mapped_to_cuda(device):
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(256, 256)}, buffer)
    with cuda_on_cpu(device):
        buffer.seek(0)
        on_gpu = torch.load(buffer, map_location="cuda")
        buffer.seek(0)
        on_host = torch.load(buffer, map_location="cpu")
        assert on(device, on_gpu["w"]) and on_gpu["w"].is_cuda and not on(device, on_host["w"])
        assert torch.cuda.memory_allocated() == 256 * 256 * 4


def test_everything_is_put_back_when_the_block_ends(device):
    load, autocast_init, record_stream = torch.load, torch.amp.autocast_mode.autocast.__init__, \
        torch.Tensor.record_stream
    with cuda_on_cpu(device):
        assert torch.cuda.is_available()
    assert not torch.cuda.is_available()
    assert torch.load is load and torch.amp.autocast_mode.autocast.__init__ is autocast_init
    assert torch.Tensor.record_stream is record_stream
    with pytest.raises((AssertionError, RuntimeError), match="not compiled with CUDA|CUDA"):
        torch.empty(1, device="cuda")
