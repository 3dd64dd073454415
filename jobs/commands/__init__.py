"""trainstack subcommands, one module each (see jobs/cli.py)."""
