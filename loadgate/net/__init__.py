"""The network stage: talking to an engine. HTTP sessions, TLS and bounded JSON calls
(`http`), connecting to the engine under test or launching the embedded simulator (`connect`),
and scraping its Prometheus `/metrics` (`scrape`). What is known about each engine (routes,
metric names) is the engine stage's (`loadgate.engine.adapters`); this stage only moves bytes."""
