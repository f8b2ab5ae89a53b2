# The server fixture lives in mcserver.py so that tests/stress can share it.
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# pylibmc's wheel carries its own libsasl2, which looks for its mechanism
# plugins (PLAIN, CRAM-MD5) where the wheel was built; point it at Debian's
# before anything imports pylibmc.
for _plugins in ("/usr/lib/x86_64-linux-gnu/sasl2", "/usr/lib/sasl2"):
    if os.path.isdir(_plugins):
        os.environ.setdefault("SASL_PATH", _plugins)
        break

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
