from loadgate.cli import entry

entry()
