import sys

from llm_locust.report.compare.cli import main

sys.exit(main())
