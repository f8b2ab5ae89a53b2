"""tac-memcached specific behaviour (skipped when TAC_SERVER is stock memcached)."""
import pytest


@pytest.mark.tac_only
def test_partitions_option(server):
    s = server(["-o", "partitions=4"])
    c = s.connect()
    assert c.stats(b"settings")["partitions"] == "4"
    assert c.line(b"set a 0 0 1\r\nx\r\n") == b"STORED\r\n"
    assert c.get(b"get a\r\n") == b"VALUE a 0 1\r\nx\r\nEND\r\n"


@pytest.mark.tac_only
def test_stats_tiers(srv):
    c = srv.connect()
    r = c.req(b"stats tiers\r\n", (b"END\r\n", b"ERROR\r\n"))
    assert r.startswith(b"STAT ") and r.endswith(b"END\r\n")
