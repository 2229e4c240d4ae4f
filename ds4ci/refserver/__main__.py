"""``python -m ds4ci.refserver``: the same as the ``ds4ci-refserver`` console script."""

import sys

from ds4ci.refserver.main import main

sys.exit(main())
