import sys

from gateway.ops.cli import main

sys.exit(main())
