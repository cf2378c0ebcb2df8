"""`python -m loadgate.sim`: the simulator's own entry point (the same command as `loadgate sim`),
which imports nothing of the client: the embedded engine's child process starts on the simulator's
modules alone. The child a `loadgate run` starts early (`--from-profile`, first) skips the command
line altogether."""

import sys

if sys.argv[1:2] == ["--from-profile"]:
    from loadgate.sim.serve import serve_profile_main

    serve_profile_main(sys.argv[2:])
else:
    from loadgate.sim.cli import main

    main()
