"""One module per CLI command: options already parsed, library calls, an exit code back."""
