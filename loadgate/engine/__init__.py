"""Stage 2, the engine: the API adapters (one per HTTP API, behind one Protocol), JSON calls,
Prometheus metrics, and connecting to an engine (or launching the embedded simulator)."""
