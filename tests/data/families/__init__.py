"""Model families that exist only for tests: their training parts, registered by the tests that
use them (`tests/data/test_family_parts.py`)."""
