"""`python -m composer --help`: see composer/cli.py."""

import sys

from composer.cli import main

sys.exit(main())
