"""pylibmc with SASL, in a process of its own: pylibmc's wheel carries its own libsasl2,
and once the test process has loaded the system's OpenSSL (Python's ssl module, the TLS
tests) that libsasl2 no longer starts a mechanism.  Reads JSON from stdin:
{"addr", "user", "password", "ops": [["set", key, value] | ["get", key]]}; writes JSON:
{"results": [...]} or {"error": "<pylibmc's message>"}.  Values travel as latin-1 text."""
import json
import os
import sys

for plugins in ("/usr/lib/x86_64-linux-gnu/sasl2", "/usr/lib/sasl2"):
    if os.path.isdir(plugins):
        os.environ.setdefault("SASL_PATH", plugins)
        break

import pylibmc  # noqa: E402  (after SASL_PATH)

req = json.load(sys.stdin)
c = pylibmc.Client([req["addr"]], binary=True, username=req["user"],
                   password=req["password"],
                   behaviors={"connect_timeout": 10000, "_poll_timeout": 10000})
out = []
try:
    for op in req["ops"]:
        if op[0] == "set":
            out.append(c.set(op[1], op[2].encode("latin-1")))
        else:
            v = c.get(op[1])
            out.append(None if v is None else
                       (v if isinstance(v, str) else v.decode("latin-1")))
    json.dump({"results": out}, sys.stdout)
except pylibmc.Error as e:
    json.dump({"error": str(e), "results": out}, sys.stdout)
