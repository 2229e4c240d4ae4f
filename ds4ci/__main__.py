"""``python -m ds4ci``: the same entry point as the ``ds4ci`` command."""

from ds4ci.cli import main

if __name__ == "__main__":
    main()
