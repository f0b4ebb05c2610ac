"""DDTREE compat shim for sglang 0.5.14 (installed as ``ddtree_compat.py``).

Where the DFlash v2 worker of one release family differs, the DDTree worker asks this
module; the manifest of each release installs the shim written against that family.
0.5.14 is the base's own behaviour (``ddtree_compat_base.CompatShim``): the draft input
carries ``verified_id`` (int32), planning lengths (``planning_seq_lens_*`` /
``reserved_seq_lens_*``) and a ``verify_done`` event.
"""

from __future__ import annotations

from sglang.srt.speculative.ddtree_compat_base import CompatShim

FAMILY = "sglang 0.5.14"

globals().update(CompatShim().module_names())
