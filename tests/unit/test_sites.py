"""Site labels: the frame each names (never the allocator's own), shortened for the snapshot page's tables; the top
sites of a state; the icicle's frame filter and its folded prefix."""
from __future__ import annotations

from fragviz.model import Block, BlockState, Frame, Segment
from fragviz.snapshot.frames import cpp_function, is_allocator_frame, visible_frames
from fragviz.ui.figures.stacks import icicle_figure
from fragviz.ui.data.sites import INTERNAL_ONLY, SITE_CHARS, icicle_weights, short_site
from fragviz.usage.sites import NO_STACK_SITE, ONLY_ALLOCATOR_SITE, site_label, top_sites

# Sites as usage.sites.site_label writes them, from the real snapshots (verl, nuggets, the cs336 ones, diffusion)
VLLM = "/usr/local/lib/python3.10/dist-packages/vllm/model_executor/layers/linear.py:178 create_weights"
INDUCTOR = "/tmp/torchinductor_drisspg/nq/cnqtho2nij4af6swya42kmd2tvb2py3brmcdj3mike6uxkmojqam.py:420 call"
CPP = ("??:0 torch::autograd::generated::ScaledDotProductEfficientAttentionBackward0::apply(std::vector<at::Tensor, "
       "std::allocator<at::Tensor> >&&)")
WINDOWS = (r"C:\Users\jgregoire\AppData\Local\Programs\Python\Python310\lib\site-packages\torch\nn\modules"
           r"\module.py:1150 convert")
HOME = "/home/c-kaitwang/assignment1/cs336_basics/training.py:22 cross_entropy_loss"


def test_short_sites_are_unchanged():
    assert short_site("/home/u/train.py:10 main") == "/home/u/train.py:10 main"
    assert short_site("(no stack recorded)") == "(no stack recorded)"


def test_a_package_path_keeps_its_root_the_file_line_and_function():
    assert short_site(VLLM) == "…/dist-packages/vllm/…/layers/linear.py:178 create_weights"
    assert short_site(WINDOWS) == r"…\site-packages\torch\nn\modules\module.py:1150 convert"


def test_a_generated_inductor_file_keeps_its_cache_folder_and_is_cut_in_its_middle():
    short = short_site(INDUCTOR)
    assert short.startswith("…/torchinductor_drisspg/nq/cnqtho2nij4a") and short.endswith("kmojqam.py:420 call")
    assert "…" in short[len("…/torchinductor_drisspg/nq/"):] and len(short) <= SITE_CHARS


def test_a_cpp_frame_loses_its_parameters_and_outer_namespaces():
    assert short_site(CPP) == "??:0 …::ScaledDotProductEfficientAttentionBackward0::apply(…)"


def test_a_path_without_a_package_root_keeps_its_innermost_folders():
    assert short_site(HOME) == "…/assignment1/cs336_basics/training.py:22 cross_entropy_loss"


def test_every_shortened_site_fits():
    for site in (VLLM, INDUCTOR, CPP, WINDOWS, HOME, "x" * 300, "/a/" + "b" * 200 + ".py:1 f",
                 "/" + "/".join("d" * 9 for _ in range(30)) + "/f.py:7 " + "g" * 80):
        assert len(short_site(site)) <= SITE_CHARS, site


# A stack recorded with stacks='all', innermost first, as PyTorch writes it: the unwinder, the allocator, c10, the
# tensor factories and the dispatcher before the op's own frames (cut from hanmin_train_19k and cs336silmont_small)
HEAD = [Frame("??", 0, "torch::unwind::unwind()"), Frame("??", 0, "torch::CapturedTraceback::gather(bool, bool, bool)"),
        Frame("memory_snapshot.cpp", 0, "torch::cuda::(anonymous namespace)::gather_with_cpp()"),
        Frame("CUDACachingAllocator.cpp", 0, "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc"
                                             "(signed char, unsigned long, CUstream_st*)"),
        Frame("", 0, "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"),
        Frame("", 0, "at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>, c10::Allocator*)"),
        Frame("RegisterCUDA.cpp", 0, "c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionInto"
                                     "Functor_<c10::CompileTimeFunctionPointer<at::Tensor (at::Tensor const&)>>>::call"),
        Frame("VariableType_3.cpp", 0, "torch::autograd::VariableType::(anonymous namespace)::bmm(c10::DispatchKeySet, "
                                       "at::Tensor const&, at::Tensor const&)"),
        Frame("??", 0, "at::_ops::bmm::call(at::Tensor const&, at::Tensor const&)")]
BMM_BACKWARD = Frame("??", 0, "torch::autograd::generated::BmmBackward0::apply(std::vector<at::Tensor, "
                              "std::allocator<at::Tensor> >&&)")
ENGINE_THREAD = [Frame("??", 0, "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> "
                                "const&)"), Frame("thread48.o", 0, "execute_native_thread_routine"),
                 Frame("??", 0, "clone")]
FORWARD = [Frame("/x/site-packages/torch/nn/modules/linear.py", 125, "forward"), Frame("/home/u/model.py", 40, "forward")]


def label_of(frame: Frame) -> str:
    return f"{frame.filename}:{frame.line} {frame.name}"


def test_a_site_is_never_one_of_the_allocators_frames():
    assert site_label(HEAD + FORWARD) == "/home/u/model.py:40 forward"  # the user's frame first
    assert site_label(HEAD + FORWARD[:1]) == label_of(FORWARD[0])  # else torch's Python
    # backward runs on the engine's thread, without Python: the autograd node that allocated (not VariableType)
    assert site_label(HEAD + [BMM_BACKWARD] + ENGINE_THREAD) == label_of(BMM_BACKWARD)
    # without an autograd frame, the operator
    assert site_label(HEAD) == "??:0 at::_ops::bmm::call(at::Tensor const&, at::Tensor const&)"
    # without one, the first frame that is neither internal nor the allocator's
    assert site_label(HEAD[:6] + ENGINE_THREAD[1:]) == label_of(HEAD[5])
    assert site_label(HEAD[:5]) == ONLY_ALLOCATOR_SITE
    assert site_label([]) == NO_STACK_SITE


def test_allocator_frames_are_the_caching_allocators_and_c10s():
    assert [is_allocator_frame(f) for f in HEAD] == [False, False, False, True, True, False, True, False, False]
    assert is_allocator_frame(Frame("/usr/lib/python3/site-packages/torch/lib/libc10_cuda.so", 0, "0x7f"))
    assert is_allocator_frame(Frame("HIPCachingAllocator.cpp", 0, "c10::hip::HIPCachingAllocator::malloc()"))
    assert not is_allocator_frame(Frame("??", 0, "c10d::ProcessGroupNCCL::allreduce(std::vector<at::Tensor>&)"))
    assert not is_allocator_frame(Frame("/x/torch/cuda/memory.py", 1, "c10::looks_like_it"))  # Python is never


def test_cpp_function_is_the_qualified_name_alone():
    assert cpp_function(HEAD[5].name) == "at::detail::_empty_generic"
    assert cpp_function(HEAD[6].name) == "c10::impl::wrap_kernel_functor_unboxed_::call"
    assert cpp_function(HEAD[2].name) == "torch::cuda::anonymous::gather_with_cpp"
    assert cpp_function("c10::TensorImpl::~TensorImpl() [clone .localalias]") == "c10::TensorImpl::~TensorImpl"
    assert cpp_function("bool operator><T>(T)") == "operator"


def test_top_sites_most_bytes_first_ties_by_site():
    stacks = {0: [USER], 1: HEAD + [BMM_BACKWARD], 2: [TORCH]}
    seg = Segment(0, 0, 40, 0, "large", (Block(0, 8, 8, BlockState.ACTIVE_ALLOCATED, 1),
                                         Block(8, 8, 8, BlockState.ACTIVE_PENDING_FREE, 2),
                                         Block(16, 8, 8, BlockState.ACTIVE_ALLOCATED, 0),
                                         Block(24, 4, 4, BlockState.ACTIVE_ALLOCATED),
                                         Block(28, 12, 12, BlockState.INACTIVE, 0)))
    got = [t.as_dict() for t in top_sites([seg], stacks.__getitem__, limit=3)]
    assert got == [{"site": label_of(USER), "bytes": 8, "blocks": 1},
                   {"site": label_of(TORCH), "bytes": 8, "blocks": 1},
                   {"site": label_of(BMM_BACKWARD), "bytes": 8, "blocks": 1}]
    assert [t.site for t in top_sites([seg], stacks.__getitem__, limit=9)][-1] == NO_STACK_SITE


USER, TORCH, CXX = Frame("/home/u/train.py", 10, "main"), Frame("/x/torch/nn/linear.py", 5, "forward"), \
    Frame("CUDACachingAllocator.cpp", 0, "malloc")


def test_visible_frames_is_the_stack_panels_filter():
    assert visible_frames((CXX, TORCH, USER), False) == (USER,)
    assert visible_frames((CXX, TORCH, USER), True) == (CXX, TORCH, USER)
    assert visible_frames((CXX, TORCH), False) == (CXX, TORCH)  # no user frame: all shown


def test_icicle_weights_add_up_stacks_that_the_filter_makes_equal():
    other = Frame("/home/u/model.py", 3, "layer")
    weights = {(CXX, TORCH, USER): 10, (TORCH, USER): 5, (CXX, other, USER): 7, (CXX, TORCH): 4, (CXX,): 2}
    # stacks without a user frame: one box, not a chain of unwinder frames (the stack panel shows them whole)
    assert icicle_weights(weights, False) == {(USER,): 15, (other, USER): 7, (INTERNAL_ONLY,): 6}
    assert icicle_weights(weights, True) == weights
    fig = icicle_figure(icicle_weights(weights, False))
    assert "(only PyTorch-internal and C++ frames)" in fig.data[0].labels


def test_icicle_folds_the_shared_prefix_into_the_root():
    main, train, step = Frame("/w/main.py", 10, "train"), Frame("/w/loop.py", 20, "run"), Frame("/w/loop.py", 30, "step")
    fwd, bwd = Frame("/w/model.py", 5, "forward"), Frame("/w/model.py", 9, "backward")
    # innermost first, as recorded: main → run → step, then forward or backward
    fig = icicle_figure({(fwd, step, train, main): 6, (bwd, step, train, main): 4})
    ice = fig.data[0]
    assert ice.labels[0] == "all (via main.py:10 train → … → loop.py:30 step)"
    assert "loop.py:20 run" in ice.hovertext[0]
    assert list(ice.labels[1:]) == ["forward (model.py:5)", "backward (model.py:9)"]
    assert list(ice.parents[1:]) == ["root", "root"] and list(ice.values) == [10, 6, 4]


def test_icicle_hover_gives_the_live_bytes_in_units():
    a, b = Frame("/w/a.py", 1, "outer"), Frame("/w/b.py", 2, "inner")
    ice = icicle_figure({(b, a): 3670016, (a,): 512}).data[0]
    assert list(ice.values)[0] == 3670528 and ice.customdata[0] == "3.50 MiB"  # the root: both stacks
    assert "%{customdata} live" in ice.hovertemplate and "%{value" not in ice.hovertemplate


def test_icicle_of_one_stack_still_draws_its_innermost_frame():
    a, b = Frame("/w/a.py", 1, "outer"), Frame("/w/b.py", 2, "inner")
    ice = icicle_figure({(b, a): 8}).data[0]
    assert ice.labels[0] == "all (via a.py:1 outer)" and list(ice.labels[1:]) == ["inner (b.py:2)"]
    assert list(ice.values) == [8, 8]


def test_icicle_depth_counts_from_the_first_branch():
    chain = tuple(Frame("/w/f.py", i, f"f{i}") for i in range(20))  # root-first
    fig = icicle_figure({tuple(reversed(chain + (Frame("/w/x.py", 1, "x"),))): 3,
                                 tuple(reversed(chain + (Frame("/w/y.py", 1, "y"),))): 2}, max_depth=1)
    assert list(fig.data[0].labels[1:]) == ["x (x.py:1)", "y (y.py:1)"]
