"""Stage 2: facts about the runner host: file identities, device probes, fingerprint, revisions, busy GPUs."""
