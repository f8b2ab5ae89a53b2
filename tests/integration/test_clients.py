"""Real client libraries: pymemcache (text), pylibmc/libmemcached (text), python-binary-memcached."""
import time

import bmemcached
import pylibmc
import pytest
from pymemcache.client.base import Client as PyClient
from pymemcache.exceptions import MemcacheServerError


@pytest.fixture
def pm(shared_srv):
    c = PyClient((shared_srv.host, shared_srv.port), connect_timeout=5, timeout=10, default_noreply=False)
    c.flush_all()
    yield c
    c.close()


@pytest.fixture
def lm(shared_srv):
    c = pylibmc.Client(["%s:%d" % (shared_srv.host, shared_srv.port)], binary=False,
                       behaviors={"cas": True, "connect_timeout": 5000, "receive_timeout": 10000000,
                                  "send_timeout": 10000000})
    c.flush_all()
    yield c
    c.disconnect_all()


# ---------------------------------------------------------------- pymemcache

def test_pymemcache_basic(pm):
    assert pm.set("k", b"v", expire=0) is True
    assert pm.get("k") == b"v"
    assert pm.get("missing") is None
    assert pm.add("k", b"x") is False
    assert pm.add("k2", b"x") is True
    assert pm.replace("k", b"r") is True
    assert pm.replace("nope", b"r") is False
    assert pm.append("k", b"A") is True
    assert pm.prepend("k", b"P") is True
    assert pm.get("k") == b"PrA"
    assert pm.delete("k") is True
    assert pm.delete("k") is False
    assert pm.get("k") is None


def test_pymemcache_flags_roundtrip(pm):
    pm.set("f", b"abc", flags=12345)
    raw = pm.raw_command(b"get f", b"END\r\n")
    assert raw == b"VALUE f 12345 3\r\nabc\r\n"


def test_pymemcache_gets_cas(pm):
    pm.set("c", b"1")
    v, cas = pm.gets("c")
    assert v == b"1" and cas
    assert pm.cas("c", b"2", cas) is True
    assert pm.cas("c", b"3", cas) is False
    assert pm.get("c") == b"2"
    assert pm.cas("absent", b"3", cas) is None


def test_pymemcache_incr_decr(pm):
    pm.set("n", b"100")
    assert pm.incr("n", 5) == 105
    assert pm.decr("n", 10) == 95
    assert pm.decr("n", 1000) == 0
    assert pm.incr("absent", 1) is None
    pm.set("s", b"text")
    with pytest.raises(Exception):
        pm.incr("s", 1)


def test_pymemcache_touch_gat(pm):
    pm.set("t", b"v", expire=1)
    assert pm.touch("t", expire=100) is True
    assert pm.touch("absent", expire=100) is False
    # pymemcache has no gat(); send it through the client's connection
    assert pm.raw_command(b"gat 100 t", b"END\r\n") == b"VALUE t 0 1\r\nv\r\n"
    assert pm.raw_command(b"gat 100 absent", b"END\r\n") == b""
    time.sleep(1.5)
    assert pm.get("t") == b"v"  # the touch extended the 1 s TTL


def test_pymemcache_flush_all(pm):
    pm.set_many({"a": b"1", "b": b"2"})
    assert pm.flush_all() is True
    assert pm.get_many(["a", "b"]) == {}


def test_pymemcache_get_many_1000(pm):
    data = {"key%04d" % i: ("value-%d" % i).encode() * (1 + i % 7) for i in range(1000)}
    assert pm.set_many(data) == []
    got = pm.get_many(list(data) + ["missing%d" % i for i in range(50)])
    assert got == data


def test_pymemcache_large_values(server):
    s = server(["-I", "2m", "-m", "64"])
    pm = PyClient((s.host, s.port), timeout=10, default_noreply=False)
    near = bytes(range(256)) * (2 * 1024 * 1024 // 256 - 4)  # just under 2 MiB with overhead
    assert pm.set("near", near) is True
    assert pm.get("near") == near
    over = b"o" * (2 * 1024 * 1024 + 1)
    with pytest.raises(MemcacheServerError):
        pm.set("over", over)
    assert pm.get("over") is None
    assert pm.get("near") == near
    pm.close()


def test_pymemcache_noreply(pm):
    pm.set("nr", b"1", noreply=True)
    pm.add("nr2", b"2", noreply=True)
    pm.append("nr", b"x", noreply=True)
    pm.delete("nr2", noreply=True)
    assert pm.get_many(["nr", "nr2"]) == {"nr": b"1x"}


# ---------------------------------------------------------------- pylibmc

def test_pylibmc_basic(lm):
    assert lm.set("k", b"v") is True
    assert lm.get("k") == b"v"
    assert lm.get("missing") is None
    assert lm.add("k", b"x") is False
    assert lm.add("k2", b"x") is True
    assert lm.replace("k", b"r") is True
    assert lm.replace("nope", b"r") is False
    assert lm.append("k", b"A") is True
    assert lm.prepend("k", b"P") is True
    assert lm.get("k") == b"PrA"
    assert lm.delete("k") is True
    assert lm.delete("k") is False


def test_pylibmc_gets_cas(lm):
    lm.set("c", b"1")
    v, cas = lm.gets("c")
    assert v == b"1" and cas
    assert lm.cas("c", b"2", cas) is True
    assert lm.cas("c", b"3", cas) is False
    assert lm.get("c") == b"2"


def test_pylibmc_incr_decr(lm):
    lm.set("n", b"10")
    assert lm.incr("n", 5) == 15
    assert lm.decr("n", 20) == 0
    with pytest.raises(pylibmc.NotFound):
        lm.incr("absent", 1)


def test_pylibmc_touch_and_expiry(lm):
    lm.set("t", b"v", time=1)
    assert lm.touch("t", 100) is True
    assert lm.touch("absent", 100) is False
    lm.set("e", b"v", time=1)
    time.sleep(2.1)
    assert lm.get("t") == b"v"
    assert lm.get("e") is None


def test_pylibmc_multi_1000(lm):
    data = {"k%04d" % i: ("v%d" % i).encode() * (1 + i % 5) for i in range(1000)}
    assert lm.set_multi(data) == []
    assert lm.get_multi(list(data) + ["nope"]) == data
    assert lm.delete_multi(list(data)[:500]) is True
    got = lm.get_multi(list(data))
    assert len(got) == 500 and all(k in got for k in list(data)[500:])


def test_pylibmc_large_values(server):
    s = server(["-I", "1m"])
    lm = pylibmc.Client([s.addr], binary=False)
    near = b"n" * (1024 * 1024 - 512)
    assert lm.set("near", near) is True
    assert lm.get("near") == near
    with pytest.raises(pylibmc.Error):
        lm.set("over", b"o" * (1024 * 1024 + 1))
    assert lm.get("over") is None
    lm.disconnect_all()


def test_pylibmc_flush(lm):
    lm.set_multi({"a": b"1", "b": b"2"})
    assert lm.flush_all() is True
    assert lm.get_multi(["a", "b"]) == {}


def test_pylibmc_pickled_and_int_values(lm):
    lm.set("obj", {"a": [1, 2, 3]})
    lm.set("int", 42)
    assert lm.get("obj") == {"a": [1, 2, 3]}
    assert lm.get("int") == 42


# ---------------------------------------------------------------- binary protocol

def test_binary_protocol_client(shared_srv):
    c = bmemcached.Client([shared_srv.addr], socket_timeout=10)
    try:
        assert c.set("bk", "bv") is True
        assert c.get("bk") == "bv"
        assert c.add("bk", "x") is False
        assert c.replace("bk", "r") is True
        assert c.get("bk") == "r"
        c.set("bn", 10)
        assert c.incr("bn", 5) == 15
        assert c.decr("bn", 3) == 12
        assert c.delete("bk") is True
        assert c.get("bk") is None
        big = "z" * 100000
        assert c.set("big", big) is True
        assert c.get("big") == big
        assert c.set_multi({"m1": "1", "m2": "2"}) == []  # list of failed keys
        assert c.get_multi(["m1", "m2", "m3"]) == {"m1": "1", "m2": "2"}
        v, cas = c.gets("m1")
        assert v == "1" and cas
        assert c.cas("m1", "9", cas) is True
        assert c.cas("m1", "8", cas) is False
        assert c.get("m1") == "9"
    finally:
        c.disconnect_all()
