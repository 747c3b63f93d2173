"""`python -m durajobs.cli`: the `durajobs` command."""

from __future__ import annotations

import sys

from durajobs.cli.commands import main

sys.exit(main())
