"""Parameter studies: spec files, the runner over Dask workers, the database, the page; `gpulab study`."""

# Besides this face, the modules other packages may import (tests/test_import_graph.py holds every import to them).
DOORS: tuple[str, ...] = ("baselines",)
