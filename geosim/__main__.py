import sys

try:
    from geosim.cli import main
except KeyboardInterrupt:  # Ctrl-C during start-up: nothing started yet, no traceback
    print("geosim: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
