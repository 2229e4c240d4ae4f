"""``ds4ci-sim``: the bundled protocol double of the DS4 inference server (``dflash_server``).

Same command line, environment variables, endpoints, request fields and exact log lines as the
real server, with a deterministic toy target and draft model keyed by the model files' bytes,
and fault switches (``DS4SIM_FAULTS``) that break every clause of the exactness contract, or
switch to another build's behaviour, on purpose. Stdlib only, so it starts fast. See
docs/simulator.md.
"""
