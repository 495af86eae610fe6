"""`python -m gpulab` is the `gpulab` command."""

import sys

from gpulab.cli import main

sys.exit(main())
