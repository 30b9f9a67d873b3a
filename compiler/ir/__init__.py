"""The graph IR: nodes and ops (graph), dtypes, passes, reference semantics, the evaluator hook (engine)."""
