"""``python -m ds4ci.simulator``: the same program as the ``ds4ci-sim`` console script."""

from ds4ci.simulator.main import main

raise SystemExit(main())
