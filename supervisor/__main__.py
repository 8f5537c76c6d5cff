"""`python -m mcpx_hooks.supervisor` is `mcpx-hooks`."""

import sys

from .cli.main import main

sys.exit(main())
