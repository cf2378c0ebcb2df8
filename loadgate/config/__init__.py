"""Stage 1, configuration: the profile (frozen dataclasses read from YAML with key paths and line
numbers), the simulator's settings, and the strict YAML loader both use."""
