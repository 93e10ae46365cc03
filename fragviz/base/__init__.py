"""The foundation every room stands on: the one error root, units and allocator constants, settings,
input limits, progress, and text cells. Imports nothing else of fragviz."""
