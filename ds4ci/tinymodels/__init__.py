"""Tiny random-weight DS4 target and DSpark draft GGUF files that the real dflash_server loads and runs."""
