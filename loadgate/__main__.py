from loadgate.cli import main

raise SystemExit(main())
