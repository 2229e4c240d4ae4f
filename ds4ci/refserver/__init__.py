"""``ds4ci-refserver``: a reference inference server on real PyTorch kernels.

It speaks the DS4 server's protocol (command line, environment, HTTP endpoints, log lines) with a
tiny Llama-like decoder whose weights are derived from the model files' SHA-256, so the parity
gate can be exercised end to end on a real GPU (or the CPU) without the real engine or real
weights. It implements plain greedy decoding, reference-exact speculative decoding (as the DS4
engine's: single-token verification after a snapshot, restore and single-token replay after a
rejection) and the
approximate fused verifier that keeps the batched verification's tokens.

Only ``args`` and ``modelfile`` are importable without PyTorch; everything else needs it.
"""
