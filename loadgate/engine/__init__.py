"""The engine stage: everything loadgate knows about the engines it speaks to, and no I/O.
`loadgate.engine.adapters` holds one module per engine family: its API adapters (request bodies,
response decoding) and its `Family` declaration (routes, metric names, what it promises)."""
