import sys

from kformer.cli import main

sys.exit(main())
