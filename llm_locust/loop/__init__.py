"""What runs on the event loop beside the load, and is not I/O: the clock across hosts (`clock`),
sessions turn after turn (`session_runner`), SIGINT and SIGTERM as an outcome (`signals`) and the
terminal's progress panel (`progress`).

The transport's rules (tests/test_structure.py): it uses gevent, never Locust nor
`llm_locust.runtime`, and imports the core. It may import the transport (the wire); the transport
never imports it: one direction between the two, no cycle.
"""
