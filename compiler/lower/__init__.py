"""Lowering to the chip: the dispatcher (dispatch), which nothing imports back; the compiled-model
protocol (compiled, a leaf); tracing (trace); the ordinary pipeline (schedule, quantize, tiling,
planner, emit, assembled in pipeline; search, dynamic); control flow (control_*); the transformer
block (transformer, transformer_emit, intmath)."""
