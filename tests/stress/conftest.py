# Reuse the integration suite's server fixture.
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))

from mcserver import server, srv  # noqa: E402,F401
