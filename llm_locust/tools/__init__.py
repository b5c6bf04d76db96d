"""Programs of their own beside a run, on the core and asyncio (never gevent or Locust): the trace
recorder (`llm-locust trace record`, a recording proxy in front of a server) and the anonymizer
(`llm-locust trace anonymize`). The simulator (`sim/`) and the GPU sidecar (`gpu/`) are the other
programs of the package."""
