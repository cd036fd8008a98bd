import sys

from geosim.cli import main

sys.exit(main())
