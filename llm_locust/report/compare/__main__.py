import sys

from llm_locust.report.compare.command import main

sys.exit(main())
