package tac.clients;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertTrue;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import net.spy.memcached.BinaryConnectionFactory;
import net.spy.memcached.CASResponse;
import net.spy.memcached.CASValue;
import net.spy.memcached.CachedData;
import net.spy.memcached.ConnectionFactory;
import net.spy.memcached.DefaultConnectionFactory;
import net.spy.memcached.MemcachedClient;
import net.spy.memcached.transcoders.Transcoder;

import org.junit.After;
import org.junit.Before;
import org.junit.Test;
import org.junit.runner.RunWith;
import org.junit.runners.Parameterized;
import org.junit.runners.Parameterized.Parameters;

/**
 * The client-matrix scenarios through spymemcached, once with its text protocol
 * (DefaultConnectionFactory) and once with its binary one (BinaryConnectionFactory).
 *
 * Server: system property or environment variable TAC_HOST (default 127.0.0.1) and TAC_PORT
 * (required).  TAC_ITEM_MAX is the server's -I in bytes (default 1 MiB).
 */
@RunWith(Parameterized.class)
public class SpymemcachedTest {

    private static final long WAIT_S = 10;
    private static final long OP_TIMEOUT_MS = 8000;

    @Parameters(name = "{0}")
    public static Collection<Object[]> protocols() {
        return Arrays.asList(new Object[][] {{"text"}, {"binary"}});
    }

    private final String protocol;
    private final List<MemcachedClient> clients = new ArrayList<>();
    private MemcachedClient mc;
    private String prefix;

    public SpymemcachedTest(String protocol) {
        this.protocol = protocol;
    }

    private static String setting(String name, String dflt) {
        String v = System.getProperty(name);
        if (v == null || v.isEmpty()) {
            v = System.getenv(name);
        }
        if (v == null || v.isEmpty()) {
            if (dflt == null) {
                throw new IllegalStateException(name + " is not set (system property or environment)");
            }
            return dflt;
        }
        return v;
    }

    private static int itemMax() {
        return Integer.parseInt(setting("TAC_ITEM_MAX", "1048576"));
    }

    private MemcachedClient newClient() throws IOException {
        String host = setting("TAC_HOST", "127.0.0.1");
        int port = Integer.parseInt(setting("TAC_PORT", null));
        // The stock factories, with a longer operation timeout than their 2.5 s: the text client
        // reconnects (after a 2 s back-off) when the server answers SERVER_ERROR, see largeValues().
        ConnectionFactory cf = protocol.equals("binary")
                ? new BinaryConnectionFactory() {
                    @Override
                    public long getOperationTimeout() {
                        return OP_TIMEOUT_MS;
                    }
                }
                : new DefaultConnectionFactory() {
                    @Override
                    public long getOperationTimeout() {
                        return OP_TIMEOUT_MS;
                    }
                };
        MemcachedClient c = new MemcachedClient(cf, Collections.singletonList(new InetSocketAddress(host, port)));
        clients.add(c);
        return c;
    }

    @Before
    public void setUp() throws IOException {
        mc = newClient();
        prefix = "spy-" + protocol + "-";
    }

    @After
    public void tearDown() {
        for (MemcachedClient c : clients) {
            c.shutdown(5, TimeUnit.SECONDS);
        }
        clients.clear();
    }

    private String k(String name) {
        return prefix + name;
    }

    private static <T> T done(Future<T> f) throws Exception {
        return f.get(WAIT_S, TimeUnit.SECONDS);
    }

    /** Stores byte[] as-is (flags 0, never compressed), unlike the default transcoder. */
    static final class RawBytes implements Transcoder<byte[]> {
        public boolean asyncDecode(CachedData d) {
            return false;
        }

        public CachedData encode(byte[] o) {
            return new CachedData(0, o, getMaxSize());
        }

        public byte[] decode(CachedData d) {
            return d.getData();
        }

        public int getMaxSize() {
            return 16 * 1024 * 1024;
        }
    }

    private static final RawBytes RAW = new RawBytes();

    private static byte[] pattern(int n, int seed) {
        byte[] b = new byte[n];
        for (int i = 0; i < n; i++) {
            b[i] = (byte) ((i * 31 + seed + (i >>> 10)) & 0xff);
        }
        return b;
    }

    @Test
    public void setGet() throws Exception {
        assertTrue(done(mc.set(k("sg"), 0, "hello world")));
        assertEquals("hello world", mc.get(k("sg")));
        assertTrue(done(mc.set(k("sg"), 0, "replaced")));
        assertEquals("replaced", mc.get(k("sg")));
        assertNull(mc.get(k("sg-missing")));
        byte[] bin = pattern(4096, 7);
        bin[0] = '\r';
        bin[1] = '\n';
        assertTrue(done(mc.set(k("sg-bin"), 0, bin, RAW)));
        assertArrayEquals(bin, mc.get(k("sg-bin"), RAW));
        assertTrue(done(mc.add(k("sg-add"), 0, "a")));
        assertFalse(done(mc.add(k("sg-add"), 0, "b")));
        assertTrue(done(mc.replace(k("sg-add"), 0, "c")));
        assertFalse(done(mc.replace(k("sg-none"), 0, "c")));
        assertEquals("c", mc.get(k("sg-add")));
    }

    @Test
    public void multiGet() throws Exception {
        int n = 150;
        List<Future<Boolean>> sets = new ArrayList<>();
        List<String> keys = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            keys.add(k("mg-" + i));
            sets.add(mc.set(k("mg-" + i), 0, "value-" + i));
        }
        for (Future<Boolean> f : sets) {
            assertTrue(done(f));
        }
        List<String> ask = new ArrayList<>(keys);
        for (int i = 0; i < 10; i++) {
            ask.add(k("mg-missing-" + i));
        }
        Map<String, Object> got = mc.getBulk(ask);
        assertEquals(n, got.size());
        for (int i = 0; i < n; i++) {
            assertEquals("value-" + i, got.get(k("mg-" + i)));
        }
    }

    @Test
    public void casConflict() throws Exception {
        String key = k("cas");
        assertTrue(done(mc.set(key, 0, "v1")));
        CASValue<Object> mine = mc.gets(key);
        assertNotNull(mine);
        assertEquals("v1", mine.getValue());
        MemcachedClient other = newClient();
        assertTrue(done(other.set(key, 0, "other")));
        assertEquals(CASResponse.EXISTS, mc.cas(key, mine.getCas(), "mine"));
        assertEquals("other", mc.get(key));
        CASValue<Object> again = mc.gets(key);
        assertTrue(again.getCas() != mine.getCas());
        assertEquals(CASResponse.OK, mc.cas(key, again.getCas(), "mine"));
        assertEquals("mine", mc.get(key));
        assertEquals(CASResponse.EXISTS, other.cas(key, again.getCas(), "stale"));
        assertEquals(CASResponse.NOT_FOUND, mc.cas(k("cas-missing"), again.getCas(), "x"));
    }

    @Test
    public void incrDecr() throws Exception {
        String key = k("ctr");
        assertTrue(done(mc.set(key, 0, "10")));
        assertEquals(15, mc.incr(key, 5));
        assertEquals(12, mc.decr(key, 3));
        assertEquals(0, mc.decr(key, 100));
        assertEquals("0", mc.get(key).toString().trim());
        assertEquals(7, mc.incr(key, 7));
        assertEquals(-1, mc.incr(k("ctr-missing"), 1));
        assertEquals(-1, mc.decr(k("ctr-missing"), 1));
        assertEquals(42, mc.incr(k("ctr-dflt"), 1, 42));
        assertEquals(43, mc.incr(k("ctr-dflt"), 1, 42));
        // 64-bit wrap-around on incr
        assertTrue(done(mc.set(k("ctr-max"), 0, "18446744073709551615")));
        assertEquals(0, mc.incr(k("ctr-max"), 1));
    }

    @Test
    public void appendPrepend() throws Exception {
        String key = k("ap");
        assertTrue(done(mc.set(key, 0, "mid")));
        assertTrue(done(mc.append(key, "-end")));
        assertTrue(done(mc.prepend(key, "start-")));
        assertEquals("start-mid-end", mc.get(key));
        assertFalse(done(mc.append(k("ap-missing"), "x")));
        assertFalse(done(mc.prepend(k("ap-missing"), "x")));
        assertNull(mc.get(k("ap-missing")));
    }

    @Test
    public void touchExpiry() throws Exception {
        // memcached's clock ticks once a second, so an item with ttl 1 may be gone at once:
        // only ttls of 2 or more are relied upon right after the set.
        assertTrue(done(mc.set(k("ttl-dies"), 1, "a")));
        assertTrue(done(mc.set(k("ttl-extended"), 2, "b")));
        assertTrue(done(mc.set(k("ttl-shortened"), 100, "c")));
        assertTrue(done(mc.set(k("ttl-forever"), 0, "d")));
        assertTrue(done(mc.touch(k("ttl-extended"), 100)));
        assertTrue(done(mc.touch(k("ttl-shortened"), 1)));
        assertFalse(done(mc.touch(k("ttl-missing"), 100)));
        Thread.sleep(2500);
        assertNull("an item set with ttl 1 is still there after 2.5 s", mc.get(k("ttl-dies")));
        assertNull("touch to ttl 1 did not shorten the item's life", mc.get(k("ttl-shortened")));
        assertEquals("touch to ttl 100 did not extend the item's life", "b", mc.get(k("ttl-extended")));
        assertEquals("d", mc.get(k("ttl-forever")));
        assertFalse(done(mc.touch(k("ttl-dies"), 100)));
    }

    @Test
    public void delete() throws Exception {
        String key = k("del");
        assertTrue(done(mc.set(key, 0, "x")));
        assertTrue(done(mc.delete(key)));
        assertNull(mc.get(key));
        assertFalse(done(mc.delete(key)));
        assertTrue(done(mc.add(key, 0, "y")));
        assertEquals("y", mc.get(key));
    }

    private long totalConnections() {
        Map<SocketAddress, Map<String, String>> stats = mc.getStats();
        assertEquals(1, stats.size());
        return Long.parseLong(stats.values().iterator().next().get("total_connections"));
    }

    @Test
    public void largeValues() throws Exception {
        int max = itemMax();
        byte[] big = pattern(max - 1024, 3);
        assertTrue(done(mc.set(k("big"), 0, big, RAW)));
        assertArrayEquals(big, mc.get(k("big"), RAW));

        long connsBefore = totalConnections();
        byte[] tooBig = pattern(max + 1024, 5);
        boolean stored;
        try {
            stored = done(mc.set(k("too-big"), 0, tooBig, RAW));
        } catch (ExecutionException e) {
            // spymemcached's text protocol reports SERVER_ERROR as an exception, drops its
            // connection and reconnects (by design of the client, not the server's doing)
            stored = false;
        }
        assertFalse("a value over -I must be rejected", stored);
        // the client (and the server) keep working afterwards
        assertNull(mc.get(k("too-big"), RAW));
        assertTrue(done(mc.set(k("after-big"), 0, "still alive")));
        assertEquals("still alive", mc.get(k("after-big")));
        assertArrayEquals(big, mc.get(k("big"), RAW));
        if (protocol.equals("binary")) {
            // the binary client keeps its connection when the server answers E2BIG
            assertEquals("the server dropped the connection after rejecting a too-large value",
                    connsBefore, totalConnections());
        }
    }

    @Test
    public void flush() throws Exception {
        for (int i = 0; i < 20; i++) {
            assertTrue(done(mc.set(k("fl-" + i), 0, "v" + i)));
        }
        assertEquals("v3", mc.get(k("fl-3")));
        assertTrue(done(mc.flush()));
        for (int i = 0; i < 20; i++) {
            assertNull(mc.get(k("fl-" + i)));
        }
        assertTrue(done(mc.set(k("fl-after"), 0, "new")));
        assertEquals("new", mc.get(k("fl-after")));
    }
}
