"""The validation suite's machinery: the pytest plugin `pytest validate/` loads, the session, the verdicts."""

# Besides this face, the modules other packages may import (tests/test_import_graph.py holds every import to them).
DOORS: tuple[str, ...] = ("known_good",)
