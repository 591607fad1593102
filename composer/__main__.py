"""`python -m composer --help`: see composer/cli.py."""

import sys

from composer.cli import main

if __name__ == "__main__":  # not when a spawned worker process imports this module as __mp_main__
    sys.exit(main())
