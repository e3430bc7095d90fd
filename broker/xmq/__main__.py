"""``python -m xmq`` runs the ``xmq`` command line."""

import sys

from xmq.app.cli import main

sys.exit(main())
