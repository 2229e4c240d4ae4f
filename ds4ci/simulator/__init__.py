"""``ds4ci-sim``: the bundled protocol double of the DS4 inference server.

Same command line, environment variables, endpoints and exact log lines as the real server
(design.md section 2), with a deterministic toy target and draft model keyed by the model
files' bytes, and fault switches (``DS4SIM_FAULTS``) that break every clause of the exactness
contract on purpose. Stdlib only, so it starts fast. See docs/simulator.md.
"""
