"""Stage 3, sending load: the pure request plan, workloads, the hot path (transport, SSE framing),
executors (closed and open loop), worker processes, the recorder and the client's health monitor."""
