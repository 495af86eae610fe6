"""The validation's checks over what discovery read: health verdicts on a Fingerprint, the GPUs' occupancy before a
run, DCGM's diagnostic and a GPU inside a container. Each returns report Checks; validate/ and the plugin call them."""

# Besides this face, the modules other packages may import (tests/test_import_graph.py holds every import to them).
DOORS: tuple[str, ...] = ("containers", "health", "occupancy")
