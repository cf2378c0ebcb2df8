"""The vocabulary the stages share and no stage owns: the figure registry (`figures`), the
threshold grammar (`thresholds`) and the API names (`apis`). It imports only loadgate's
top-level vocabulary modules (`errors`, `records`), so every stage folder can read it."""
