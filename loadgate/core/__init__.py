"""The vocabulary the stages share and no stage owns: the figure registry (`figures`) and the
threshold grammar (`thresholds`). It imports only loadgate's top-level vocabulary modules
(`errors`, `records`), so every stage folder can read it."""
