"""The ``theseus`` command line."""
