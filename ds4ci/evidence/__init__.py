"""Stage 4: the evidence store: attempts, manifest, seal, bundles, results.json, and verify."""
