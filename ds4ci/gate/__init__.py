"""Stage 5: one gate run from settings to verdict: build, servers, extra checks, judging, sealing."""
