"""Stage 5, analysis: pure functions of saved run files — the figure registry, metrics, summaries,
acceptance, validity, thresholds and A/B statistics."""
