"""DDTree overlay placeholder.

Shipped by ddtree-overlay until the DDTree payload lands: it proves that the overlay's whole new
files reach the installed sglang and leave again on rollback. It imports nothing.
"""

OVERLAY_ALGORITHMS = ("DDTREE",)


def overlay_installed() -> bool:
    return True
