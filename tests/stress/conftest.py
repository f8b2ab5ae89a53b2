# Reuse the integration suite's server fixture and hooks (server stderr on
# failure, the tac_only marker).
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))

from mcserver import (  # noqa: E402,F401
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_makereport,
    server,
    srv,
)
