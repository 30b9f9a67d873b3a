"""The graph IR: nodes and ops (graph), dtypes, passes, reference semantics, the reference evaluator
(evaluate) and the device hook (engine)."""
