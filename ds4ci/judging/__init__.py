"""Stage 3: the rules: the server's log protocol, attribution of lines to requests, verdicts from raw evidence."""
