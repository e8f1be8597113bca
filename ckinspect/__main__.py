import sys

from ckinspect.cli import main

sys.exit(main())
