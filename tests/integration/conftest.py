# The server fixture lives in mcserver.py so that tests/stress can share it.
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mcserver import (  # noqa: E402,F401  (fixtures and hooks are picked up by name)
    conn,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_makereport,
    server,
    shared_srv,
    shm_file,
    srv,
)
