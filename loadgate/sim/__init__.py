"""The simulated LLM serving engine: a deterministic model behind a continuous-batching loop,
served over vLLM's OpenAI routes, SGLang's native `/generate` and vLLM-named Prometheus metrics.

Public entry points (import them from their modules; this package imports nothing eagerly):
  loadgate.sim.server   build_app(cfg), running_sim(cfg, host, port), SimProcess, RunningSim
  loadgate.config.simconfig   SimConfig, SpeculativeConfig, DivergenceConfig, FaultConfig
  loadgate.sim.settings config_from_mapping, knob_fields
  loadgate.sim.model    SimModel (ground_truth, dists, full_logprobs), GroundTruth
  loadgate.sim.tokenizer Tokenizer
  loadgate.sim.truth    TruthLog, RequestTruth, ChunkTruth
  loadgate.sim.speculative / divergence / faults: the definitions those knobs follow
Module map: vocab, tokenizer, chat (template), model, hashing; sequence, engine, speculative,
divergence, metrics; params (request parsing), openai_format, sglang_format, errors; serving
(the shared request path), routes, server, process, settings, cli; early (the child a `loadgate
run` starts before it imports anything) and serve (serving until stopped, without the command line).
"""
