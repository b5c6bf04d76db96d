"""What any output of llm-locust prints is safe to print: secrets masked (`masking`), a server's
words made printable text (`terminal`). Every layer writes output, so this sits low in the core,
above the results document types only, and imports nothing else of the package."""
