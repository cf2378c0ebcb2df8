"""`python -m loadgate.sim`: the simulator's own entry point (the same command as `loadgate sim`),
which imports nothing of the client: the embedded engine's child process starts on the simulator's
modules alone."""

from loadgate.sim.cli import main

main()
