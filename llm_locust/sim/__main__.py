import sys

from llm_locust.sim.options import main

sys.exit(main())
