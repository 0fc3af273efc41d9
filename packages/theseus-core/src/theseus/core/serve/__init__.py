"""``theseus serve``: a read-only web view of a root's runs (optional: ``theseus-core[serve]``).

- :mod:`.metrics_cache`: ``metrics.jsonl`` read incrementally as it grows;
- :mod:`.file_memo`: values recomputed only when their files change;
- :mod:`.config_view`: saved configs flattened, redacted and compared;
- :mod:`.root_view`: everything the pages show, read from the root and nothing else;
- :mod:`.guard`: loopback binding, the token, the Host check, read-only methods;
- :mod:`.app`: the Starlette app (pages, ``/api/``, static files);
- :mod:`.command`: the CLI command that binds and serves.
"""
