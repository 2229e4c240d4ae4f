"""Stage 1: every setting, its default and where it comes from (config file, CLI)."""
