import sys

from llm_locust.sim.cli import main

sys.exit(main())
