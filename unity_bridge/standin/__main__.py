import sys

from unity_bridge.standin.build import main

sys.exit(main())
