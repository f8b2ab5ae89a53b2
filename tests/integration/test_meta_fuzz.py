"""Fuzz the meta commands (mg, ms, md, ma, mn, me) over the network with
requests built to hit the token parsers.

Most commands are well-formed, with flags drawn from each command's own
set; a mutated one has on purpose: a number (a flag's token or ms's data
length) set to a boundary value (-1, 0, 2^31-1, 2^32, 2^63, 2^64, 30
digits ...), a data length that disagrees with the data, flags shuffled,
repeated, dropped or unknown, a bad mode, an over-long key or opaque, a
broken base64 key, or another command word.

Checks: every answer is a sequence of whole meta replies (a VA line's data
block has the length it states), keys stored before the fuzzing read back
intact afterwards, the server stays up.  FUZZ_SEED replays a run (the seed
is printed); FUZZ_COMMANDS sets its length.
"""
import base64
import os
import random
import zlib

from fuzz_net import BOUNDARY_NUMBERS, exchange, fuzz_seed

COMMANDS = int(os.environ.get("FUZZ_COMMANDS", "12000"))
ITEM_MAX = 1 << 20
REPLIES = {b"HD", b"VA", b"EN", b"NF", b"NS", b"EX", b"MN", b"ME",
           b"ERROR", b"CLIENT_ERROR", b"SERVER_ERROR"}
KEY_LENGTHS = [1, 1, 2, 8, 33, 250]
VALUE_CHARS = b"0123456789XYZ_"

# Flags each command takes: a letter alone, or with a token maker.
TTL = [b"0", b"1", b"-1", b"100", b"2592000", b"2592001"]
NUM = [b"0", b"1", b"7", b"255", b"4294967295"]


def _pick(values):
    return lambda rng: rng.choice(values)


def _opaque(rng):
    return b"%x" % rng.getrandbits(32)


FLAGS = {
    b"mg": {b"v": None, b"k": None, b"s": None, b"t": None, b"c": None, b"f": None,
            b"h": None, b"l": None, b"q": None, b"u": None, b"O": _opaque,
            b"T": _pick(TTL), b"N": _pick(TTL), b"R": _pick(TTL)},
    b"ms": {b"T": _pick(TTL), b"F": _pick(NUM), b"C": _pick(NUM), b"I": None, b"q": None,
            b"k": None, b"c": None, b"O": _opaque,
            b"M": _pick([b"S", b"E", b"A", b"P", b"R"])},
    b"md": {b"q": None, b"I": None, b"T": _pick(TTL), b"C": _pick(NUM), b"k": None,
            b"O": _opaque},
    b"ma": {b"N": _pick(TTL), b"J": _pick(NUM), b"D": _pick(NUM), b"T": _pick(TTL),
            b"M": _pick([b"I", b"D", b"+", b"-"]), b"q": None, b"t": None, b"c": None,
            b"v": None, b"k": None, b"O": _opaque},
}


def encode(key, version):
    body = b"%s|%d|" % (key, version) + bytes(random.Random(key).choice(VALUE_CHARS)
                                              for _ in range(40))
    return body + b"|%08x" % zlib.crc32(body)


def fuzz_key(rng):
    """Keys of 1 to 250 bytes, none of them a "pre:" key."""
    return (b"z%d-" % rng.randrange(50) + b"k" * 250)[:rng.choice(KEY_LENGTHS)]


def valid_command(rng):
    """(tokens, data): a command's tokens and, for ms, its data block."""
    cmd = rng.choice([b"mg", b"mg", b"ms", b"ms", b"md", b"ma", b"mn", b"me"])
    if cmd == b"mn":
        return [cmd], None
    key = fuzz_key(rng)
    flags = []
    if rng.random() < 0.15:
        key = base64.b64encode(key)
        flags.append(b"b")
    if cmd == b"me":
        return [cmd, key] + flags, None
    table = FLAGS[cmd]
    for letter in rng.sample(sorted(table), rng.randrange(0, 5)):
        make = table[letter]
        flags.append(letter + (make(rng) if make else b""))
    if cmd == b"ms":
        if rng.random() < 0.5:
            data = b"%d" % rng.choice([0, 1, 99, 18446744073709551615])
        else:
            data = bytes(rng.choice(VALUE_CHARS) for _ in range(rng.choice([0, 1, 10, 100, 1000])))
        return [cmd, key, b"%d" % len(data)] + flags, data
    return [cmd, key] + flags, None


def mutate(rng, tokens, data):
    tokens = list(tokens)
    first = 3 if tokens[0] == b"ms" else 2          # flags start here
    for _ in range(rng.choice([1, 1, 2, 3])):
        what = rng.randrange(9)
        if what == 0 and len(tokens) > first:
            # a flag's number at a boundary
            i = rng.randrange(first, len(tokens))
            tokens[i] = tokens[i][:1] + rng.choice(BOUNDARY_NUMBERS)
        elif what == 1 and tokens[0] == b"ms" and len(tokens) > 2:
            # the data length disagrees with the data
            n = len(data or b"")
            tokens[2] = rng.choice(BOUNDARY_NUMBERS + [b"%d" % v for v in (
                n - 1, n + 1, n + 2, ITEM_MAX - 1, ITEM_MAX, ITEM_MAX + 1)])
        elif what == 2 and len(tokens) > first + 1:
            flags = tokens[first:]
            rng.shuffle(flags)
            tokens[first:] = flags
        elif what == 3 and len(tokens) > first:
            tokens.append(rng.choice(tokens[first:]))   # a flag twice
        elif what == 4 and len(tokens) > first:
            del tokens[rng.randrange(first, len(tokens))]
        elif what == 5:
            tokens.append(rng.choice([b"x", b"Z", b"!", b"M", b"MX", b"MSS", b"O" + b"o" * 40,
                                      b"b", b"N", b"T", b"E" + rng.choice(BOUNDARY_NUMBERS)]))
        elif what == 6 and len(tokens) > 1:
            tokens[1] = rng.choice([b"", b"k" * 251, b"k" * 250, b"a b", b"!!!!", b"a\x00b",
                                    base64.b64encode(b"k" * 188)[:-1]])
        elif what == 7:
            tokens[0] = rng.choice([b"mg", b"ms", b"md", b"ma", b"mn", b"me", b"m", b"mx",
                                    b"MG", b"mgs"])
        else:
            tokens.insert(rng.randrange(1, len(tokens) + 1), rng.choice(BOUNDARY_NUMBERS))
    return tokens, data


def render(rng, tokens, data, clean=True):
    eol = b"\r\n" if clean or rng.random() < 0.8 else rng.choice([b"\n", b"\r\r\n", b" \r\n"])
    out = b" ".join(tokens) + eol
    if data is not None:
        out += data + (b"\r\n" if clean or rng.random() < 0.9 else b"\n")
    return out


def connection_commands(rng):
    """Valid commands, then bad ones, then a few more valid ones: a command
    the server refuses may end the connection, so it comes after the valid
    ones."""
    cmds = [render(rng, *valid_command(rng)) for _ in range(rng.randrange(0, 12))]
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        cmds.append(render(rng, *mutate(rng, *valid_command(rng)), clean=False))
    cmds += [render(rng, *valid_command(rng)) for _ in range(rng.randrange(0, 4))]
    return cmds


def check_replies(answer, whole):
    """The answer is whole meta replies (the last may be cut if the server
    reset the connection).  Returns the number of replies."""
    pos = n = 0
    while pos < len(answer):
        end = answer.find(b"\r\n", pos)
        if end < 0:
            assert not whole, "a cut reply line at byte %d: %r" % (pos, answer[pos:pos + 200])
            return n
        line = answer[pos:end]
        word = line.split(b" ", 1)[0]
        assert word in REPLIES, "not a meta reply at byte %d: %r" % (pos, line[:200])
        pos = end + 2
        n += 1
        if word == b"VA":
            size = int(line.split(b" ")[1])
            if pos + size + 2 > len(answer):
                assert not whole, "a VA block of %d bytes cut at byte %d" % (size, pos)
                return n
            assert answer[pos + size:pos + size + 2] == b"\r\n", \
                "a VA block of %d bytes does not end in \\r\\n at byte %d: %r" % (
                    size, pos, answer[pos + size:pos + size + 20])
            pos += size + 2
    return n


def test_meta_fuzz_keeps_data_and_server(server):
    seed = fuzz_seed()
    rng = random.Random(seed)
    srv = server(args=["-c", "4096"])

    keep = {}
    c = srv.connect()
    for i in range(300):
        key = b"pre:%d" % i
        keep[key] = encode(key, i)
        assert c.line(b"set %s %d 0 %d\r\n%s\r\n" % (key, i, len(keep[key]), keep[key])) == b"STORED\r\n"

    sent = replies = conns = 0
    while sent < COMMANDS:
        conns += 1
        cmds = connection_commands(rng)
        sent += len(cmds)
        where = "seed %d, connection %d" % (seed, conns)
        try:
            answer, whole = exchange(srv, cmds)
            replies += check_replies(answer, whole)
        except AssertionError as e:
            raise AssertionError("%s: %s" % (where, e))
        assert srv.alive(), "server died after %d commands (%s)" % (sent, where)

    bad = []
    for i, (key, value) in enumerate(keep.items()):
        want = b"VALUE %s %d %d\r\n%s\r\nEND\r\n" % (key, i, len(value), value)
        got = c.get(b"get %s\r\n" % key)
        if got != want:
            bad.append((key, got[:100]))
    assert not bad, "seed %d: %d keys damaged, e.g. %r" % (seed, len(bad), bad[:5])
    assert srv.alive()
    print("sent %d commands over %d connections, %d replies" % (sent, conns, replies))
