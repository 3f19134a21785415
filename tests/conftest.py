"""Test-session settings.

The kernels compile in the test process (``APPROX_GBDT_BACKGROUND_COMPILE=0``): with an empty
Numba cache, a first call on long lists would otherwise let the windowed loops stand in for the
grid while it compiles in a background process, and which of the two a call takes would depend
on timing. ``test_background_compile.py`` tests that path in processes of its own.
"""

import os

os.environ["APPROX_GBDT_BACKGROUND_COMPILE"] = "0"
