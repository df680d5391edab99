import sys

from scaler.conformance.cli import main

sys.exit(main())
