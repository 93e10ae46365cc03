"""A model of PyTorch's CUDA caching allocator: its settings and its rules (rounding, segment sizes, splits)."""
