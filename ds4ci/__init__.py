"""ds4ci: the DS4 reference-exact speculative-decoding parity gate."""

__version__ = "0.1.0"
