"""Calibration: planted faults applied to a real engine checkout, rebuilt, gated; the sealed record of what was caught."""
