"""Lowering to the chip: the dispatcher (dispatch), then schedule, quantize, tiling, planner, emit, search, dynamic, control, transformer."""
