#!/usr/bin/python3
"""Writes nat64.txt: NAT64 translations (RFC 7915, RFC 6052) built by
scapy, independently of Sluice's code, for pipeline/tests/nat64_golden.rs.

Each case is a sequence of frames given to a fresh gateway and the frame
it must send: `> PORT HEX` in, `< PORT HEX` out. Scapy fills every length
and checksum from scratch. The network (the test builds the same one):
port 0 (02:51:00:00:00:00) has 2001:db8:1::1/64 and the IPv6-only client
2001:db8:1::10 (02:aa:00:00:00:01); port 1 (02:51:00:00:00:01) has
198.19.0.1/24 and the next hop 198.19.0.2 (02:bb:00:00:00:01) to
203.0.113.0/24 and 198.51.100.0/24. NAT64 translates 64:ff9b::/96 out of
port 1 from its address, with the single NAT port 40000. What the
translator chooses where RFC 7915 leaves it to it: the IPv4
identification (0 with DF set, else a counter from 1), DF (set above
1,260 bytes), the IPv4 TTL / IPv6 hop limit (copied, less one for the hop).
Fragments (RFC 7915 4.1, 5.1.1) are translated one by one, each keeping
its offset and More Fragments, the identification carried over (IPv6's
low 16 bits as IPv4's; IPv4's zero-extended as IPv6's), DF clear: the
expected ones are the whole datagram as the other family sends it (its
checksum computed by scapy over all of it) cut where the fragments
given were cut.

Run: /usr/bin/python3 pipeline/tests/golden/nat64.py > pipeline/tests/golden/nat64.txt
"""

from scapy.all import (ICMP, IP, TCP, UDP, Ether, ICMPv6DestUnreach,
                       ICMPv6EchoReply, ICMPv6EchoRequest, ICMPv6PacketTooBig,
                       ICMPv6TimeExceeded, IPv6, IPv6ExtHdrFragment, Raw,
                       fragment, fragment6)

R0, R1 = "02:51:00:00:00:00", "02:51:00:00:00:01"
HOST, GW = "02:aa:00:00:00:01", "02:bb:00:00:00:01"
CLIENT, POOL, SERVER = "2001:db8:1::10", "198.19.0.1", "203.0.113.7"
SERVER6 = "64:ff9b::" + SERVER
HOP = "198.51.100.1"
PORT = 40000


def lan(p):
    """A frame from the client to the router."""
    return bytes(Ether(src=HOST, dst=R0) / p)


def to_lan(p):
    """A frame the router sends to the client."""
    return bytes(Ether(src=R0, dst=HOST) / p)


def wan(p):
    """A frame from the next hop to the router."""
    return bytes(Ether(src=GW, dst=R1) / p)


def to_wan(p):
    """A frame the router sends to the next hop."""
    return bytes(Ether(src=R1, dst=GW) / p)


cases = []


def case(name, *steps):
    cases.append((name, steps))


# UDP out and back; a reply without a UDP checksum gets one.
case(
    "udp",
    (0, lan(IPv6(src=CLIENT, dst=SERVER6, hlim=64) / UDP(sport=5000, dport=53) / b"query"),
     1, to_wan(IP(src=POOL, dst=SERVER, ttl=63, id=1) / UDP(sport=PORT, dport=53) / b"query")),
    (1, wan(IP(src=SERVER, dst=POOL, ttl=50, id=777, flags="DF") / UDP(sport=53, dport=PORT) / b"answer!"),
     0, to_lan(IPv6(src=SERVER6, dst=CLIENT, hlim=49) / UDP(sport=53, dport=5000) / b"answer!")),
    (1, wan(IP(src=SERVER, dst=POOL, ttl=50) / UDP(sport=53, dport=PORT, chksum=0) / b"no sum"),
     0, to_lan(IPv6(src=SERVER6, dst=CLIENT, hlim=49) / UDP(sport=53, dport=5000) / b"no sum")),
)

# TCP handshake: the traffic class and TOS copied, options untouched.
syn_opts = [("MSS", 1440), ("SAckOK", b""), ("Timestamp", (1, 0)), ("NOP", None), ("WScale", 7)]
case(
    "tcp",
    (0, lan(IPv6(src=CLIENT, dst=SERVER6, hlim=64, tc=0x28) / TCP(sport=40123, dport=80, flags="S", seq=1000, window=64800, options=syn_opts)),
     1, to_wan(IP(src=POOL, dst=SERVER, ttl=63, tos=0x28, id=1) / TCP(sport=PORT, dport=80, flags="S", seq=1000, window=64800, options=syn_opts))),
    (1, wan(IP(src=SERVER, dst=POOL, ttl=57, flags="DF", tos=0x10) / TCP(sport=80, dport=PORT, flags="SA", seq=5000, ack=1001, window=65160, options=[("MSS", 1460)])),
     0, to_lan(IPv6(src=SERVER6, dst=CLIENT, hlim=56, tc=0x10) / TCP(sport=80, dport=40123, flags="SA", seq=5000, ack=1001, window=65160, options=[("MSS", 1460)]))),
    (0, lan(IPv6(src=CLIENT, dst=SERVER6, hlim=64) / TCP(sport=40123, dport=80, flags="A", seq=1001, ack=5001, window=507)),
     1, to_wan(IP(src=POOL, dst=SERVER, ttl=63, id=2) / TCP(sport=PORT, dport=80, flags="A", seq=1001, ack=5001, window=507))),
)

# Echo: ICMPv6 128/129 and ICMP 8/0, the identifier the flow's port.
case(
    "echo",
    (0, lan(IPv6(src=CLIENT, dst=SERVER6, hlim=64) / ICMPv6EchoRequest(id=0x1234, seq=1, data=b"ping payload 56 bytes.........................!")),
     1, to_wan(IP(src=POOL, dst=SERVER, ttl=63, id=1) / ICMP(type=8, id=PORT, seq=1) / b"ping payload 56 bytes.........................!")),
    (1, wan(IP(src=SERVER, dst=POOL, ttl=60) / ICMP(type=0, id=PORT, seq=1) / b"ping payload 56 bytes.........................!"),
     0, to_lan(IPv6(src=SERVER6, dst=CLIENT, hlim=59) / ICMPv6EchoReply(id=0x1234, seq=1, data=b"ping payload 56 bytes.........................!"))),
)

# A datagram above 1,260 bytes as IPv4 leaves with DF set.
big = bytes(range(256)) * 5 + b"0123456789" * 2
case(
    "large",
    (0, lan(IPv6(src=CLIENT, dst=SERVER6, hlim=64) / UDP(sport=5001, dport=9) / big),
     1, to_wan(IP(src=POOL, dst=SERVER, ttl=63, id=0, flags="DF") / UDP(sport=PORT, dport=9) / big)),
)

# ICMPv4 errors about the flow, as ICMPv6 errors with their quotes
# translated: port unreachable from the server (whole quote), time
# exceeded and fragmentation needed from a router on the way (the
# 8-byte quote RFC 792 asks for least).
sent = IP(src=POOL, dst=SERVER, ttl=61, id=1) / UDP(sport=PORT, dport=53) / b"query"
seen = IPv6(src=CLIENT, dst=SERVER6, hlim=61) / UDP(sport=5000, dport=53) / b"query"
out = (0, lan(IPv6(src=CLIENT, dst=SERVER6, hlim=64) / UDP(sport=5000, dport=53) / b"query"),
       1, to_wan(IP(src=POOL, dst=SERVER, ttl=63, id=1) / UDP(sport=PORT, dport=53) / b"query"))
case(
    "port-unreachable",
    out,
    (1, wan(IP(src=SERVER, dst=POOL, ttl=64) / ICMP(type=3, code=3) / bytes(sent)),
     0, to_lan(IPv6(src=SERVER6, dst=CLIENT, hlim=63) / ICMPv6DestUnreach(code=4) / bytes(seen))),
)
case(
    "time-exceeded",
    out,
    (1, wan(IP(src=HOP, dst=POOL, ttl=250) / ICMP(type=11, code=0) / bytes(sent)[:28]),
     0, to_lan(IPv6(src="64:ff9b::" + HOP, dst=CLIENT, hlim=249) / ICMPv6TimeExceeded(code=0) / bytes(seen)[:48])),
)
tsent = IP(src=POOL, dst=SERVER, ttl=61, id=0, flags="DF") / TCP(sport=PORT, dport=80, flags="A", seq=1001, ack=5001) / (b"x" * 1400)
tseen = IPv6(src=CLIENT, dst=SERVER6, hlim=61) / TCP(sport=40123, dport=80, flags="A", seq=1001, ack=5001) / (b"x" * 1400)
case(
    "fragmentation-needed",
    (0, lan(IPv6(src=CLIENT, dst=SERVER6, hlim=64) / TCP(sport=40123, dport=80, flags="S", seq=1000, window=64800)),
     1, to_wan(IP(src=POOL, dst=SERVER, ttl=63, id=1) / TCP(sport=PORT, dport=80, flags="S", seq=1000, window=64800))),
    (1, wan(IP(src=HOP, dst=POOL, ttl=254) / ICMP(type=3, code=4, nexthopmtu=1400) / bytes(tsent)[:28]),
     0, to_lan(IPv6(src="64:ff9b::" + HOP, dst=CLIENT, hlim=253) / ICMPv6PacketTooBig(mtu=1420) / bytes(tseen)[:48])),
)

# An ICMPv6 error from the client about a reply, as an ICMPv4 error to
# the server with its quote translated.
reply6 = IPv6(src=SERVER6, dst=CLIENT, hlim=49) / UDP(sport=53, dport=5000) / b"late"
reply4 = IP(src=SERVER, dst=POOL, ttl=49, id=0) / UDP(sport=53, dport=PORT) / b"late"
case(
    "client-error",
    out,
    (1, wan(IP(src=SERVER, dst=POOL, ttl=50) / UDP(sport=53, dport=PORT) / b"late"),
     0, to_lan(reply6)),
    (0, lan(IPv6(src=CLIENT, dst=SERVER6, hlim=64) / ICMPv6DestUnreach(code=4) / bytes(reply6)),
     1, to_wan(IP(src=POOL, dst=SERVER, ttl=63, id=0) / ICMP(type=3, code=3) / bytes(reply4))),
)

# Fragments, in order: a 3,000-byte UDP datagram from the client in
# IPv6 fragments of 1,280 bytes, out as IPv4 fragments; the server's
# 3,000-byte answer in IPv4 fragments of 1,200, back as IPv6 fragments.
def cut_like(frags, whole_l4):
    """Where each fragment's data falls in the datagram: (offset in 8-byte
    units, more follow), and the other family's L4 bytes there."""
    out = []
    for f in frags:
        raw = bytes(f)
        f = IPv6(raw) if f.haslayer(IPv6ExtHdrFragment) else IP(raw)
        if f.haslayer(IPv6ExtHdrFragment):
            h = f[IPv6ExtHdrFragment]
            off, more, n = h.offset, h.m, len(bytes(h.payload))
        else:
            off, more, n = f.frag, int(f.flags.MF), len(raw) - f.ihl * 4
        out.append((off, more, whole_l4[off * 8:off * 8 + n]))
    return out


query = bytes(range(256)) * 11 + b"q" * 184
assert len(query) == 3000
dgram6 = (IPv6(src=CLIENT, dst=SERVER6, hlim=64) / IPv6ExtHdrFragment(id=0x12345678)
          / UDP(sport=5002, dport=53) / query)
frags6 = fragment6(dgram6, 1280)
sent4 = bytes(IP(src=POOL, dst=SERVER) / UDP(sport=PORT, dport=53) / query)[20:]
steps = []
for f, (off, more, data) in zip(frags6, cut_like(frags6, sent4)):
    steps.append((0, lan(f), 1, to_wan(IP(src=POOL, dst=SERVER, ttl=63, id=0x5678, flags="MF" if more else 0, frag=off, proto=17) / Raw(data))))
answer = bytes(reversed(query))
dgram4 = IP(src=SERVER, dst=POOL, ttl=50, id=4321) / UDP(sport=53, dport=PORT) / answer
frags4 = fragment(dgram4, fragsize=1200)
back6 = bytes(IPv6(src=SERVER6, dst=CLIENT) / UDP(sport=53, dport=5002) / answer)[40:]
for f, (off, more, data) in zip(frags4, cut_like(frags4, back6)):
    steps.append((1, wan(f), 0, to_lan(IPv6(src=SERVER6, dst=CLIENT, hlim=49) / IPv6ExtHdrFragment(nh=17, offset=off, m=more, id=4321) / Raw(data))))
assert len(frags6) == 3 and len(frags4) == 3
case("fragments", *steps)

# A 3,000-byte echo each way in fragments (ping -s 2992): the ICMP
# checksum's pseudo-header (IPv6's) holds the whole message's length, so
# the first fragment waits for the last and leaves with it, translated,
# ahead of the others that waited for it. A step without an answer is a
# frame kept; the frames after a step leave in the order listed.
ping = bytes(range(256)) * 11 + b"p" * 176
assert len(ping) == 2992
echo6 = (IPv6(src=CLIENT, dst=SERVER6, hlim=64) / IPv6ExtHdrFragment(id=0xabcd0102)
         / ICMPv6EchoRequest(id=0x4321, seq=7, data=ping))
efrags6 = fragment6(echo6, 1280)
echo4 = bytes(IP(src=POOL, dst=SERVER) / ICMP(type=8, id=PORT, seq=7) / ping)[20:]
out4 = [(1, to_wan(IP(src=POOL, dst=SERVER, ttl=63, id=0x0102, flags="MF" if more else 0, frag=off, proto=1) / Raw(data)))
        for off, more, data in cut_like(efrags6, echo4)]
steps = [(0, lan(f)) for f in efrags6[:-1]] + [(0, lan(efrags6[-1]), *out4)]
pong = bytes(reversed(ping))
pong4 = IP(src=SERVER, dst=POOL, ttl=50, id=999) / ICMP(type=0, id=PORT, seq=7) / pong
efrags4 = fragment(pong4, fragsize=1200)
back6 = bytes(IPv6(src=SERVER6, dst=CLIENT) / ICMPv6EchoReply(id=0x4321, seq=7, data=pong))[40:]
out6 = [(0, to_lan(IPv6(src=SERVER6, dst=CLIENT, hlim=49) / IPv6ExtHdrFragment(nh=58, offset=off, m=more, id=999) / Raw(data)))
        for off, more, data in cut_like(efrags4, back6)]
steps += [(1, wan(f)) for f in efrags4[:-1]] + [(1, wan(efrags4[-1]), *out6)]
assert len(efrags6) == 3 and len(efrags4) == 3
case("echo-fragments", *steps)

# Out of order: the client's last echo fragment first (it waits for the
# first, which then leaves at once, its length known, and the last after
# it), then the middle one; the server's UDP answer last fragment first
# and then the middle (they wait for their first, and leave grown into
# IPv6's headers after it).
steps = [(0, lan(efrags6[2])), (0, lan(efrags6[0]), out4[0], out4[2]), (0, lan(efrags6[1]), out4[1])]
query6 = IPv6(src=CLIENT, dst=SERVER6, hlim=64) / UDP(sport=5002, dport=53) / b"query"
steps.append((0, lan(query6), 1, to_wan(IP(src=POOL, dst=SERVER, ttl=63, id=1) / UDP(sport=PORT, dport=53) / b"query")))
answer = bytes((i * 3) % 256 for i in range(2816)) + b"a" * 184
dgram4 = IP(src=SERVER, dst=POOL, ttl=50, id=4444) / UDP(sport=53, dport=PORT) / answer
ufrags4 = fragment(dgram4, fragsize=1200)
uback6 = bytes(IPv6(src=SERVER6, dst=CLIENT) / UDP(sport=53, dport=5002) / answer)[40:]
uout6 = [(0, to_lan(IPv6(src=SERVER6, dst=CLIENT, hlim=49) / IPv6ExtHdrFragment(nh=17, offset=off, m=more, id=4444) / Raw(data)))
         for off, more, data in cut_like(ufrags4, uback6)]
assert len(ufrags4) == 3
steps += [(1, wan(ufrags4[2])), (1, wan(ufrags4[1])), (1, wan(ufrags4[0]), uout6[0], uout6[2], uout6[1])]
case("fragments-out-of-order", *steps)

# The server's packets without DF that become IPv6 packets longer than
# the translator's lowest-ipv6-mtu (RFC 7915 5.1.1: 1,280 by default)
# leave as IPv6 fragments of 1,232 bytes of payload at most (1,280 less
# the IPv6 and fragment headers, a multiple of 8), the IPv4
# identification as theirs: a whole 1,500-byte datagram (a fragment
# header added), and each fragment of a 3,000-byte datagram sent over a
# 1,500-byte IPv4 link.
def split6(ident, l4, pieces):
    return [(0, to_lan(IPv6(src=SERVER6, dst=CLIENT, hlim=49) / IPv6ExtHdrFragment(nh=17, offset=a // 8, m=m, id=ident) / Raw(l4[a:b])))
            for a, b, m in pieces]


query6 = IPv6(src=CLIENT, dst=SERVER6, hlim=64) / UDP(sport=5003, dport=53) / b"q"
steps = [(0, lan(query6), 1, to_wan(IP(src=POOL, dst=SERVER, ttl=63, id=1) / UDP(sport=PORT, dport=53) / b"q"))]
data = bytes((i * 5) % 251 for i in range(1472))
whole4 = IP(src=SERVER, dst=POOL, ttl=50, id=0x2222) / UDP(sport=53, dport=PORT) / data
whole6 = bytes(IPv6(src=SERVER6, dst=CLIENT) / UDP(sport=53, dport=5003) / data)[40:]
assert len(bytes(whole4)) == 1500
steps.append((1, wan(whole4), *split6(0x2222, whole6, [(0, 1232, 1), (1232, 1480, 0)])))
data = bytes((i * 11) % 253 for i in range(3000))
dgram4 = IP(src=SERVER, dst=POOL, ttl=50, id=0x3333) / UDP(sport=53, dport=PORT) / data
dgram6 = bytes(IPv6(src=SERVER6, dst=CLIENT) / UDP(sport=53, dport=5003) / data)[40:]
sfrags4 = fragment(dgram4, fragsize=1480)
assert [len(bytes(f)) for f in sfrags4] == [1500, 1500, 68]
pieces = [[(0, 1232, 1), (1232, 1480, 1)], [(1480, 2712, 1), (2712, 2960, 1)], [(2960, 3008, 0)]]
for f, p in zip(sfrags4, pieces):
    steps.append((1, wan(f), *split6(0x3333, dgram6, p)))
case("split-to-ipv6", *steps)

for name, steps in cases:
    print(f"# {name}")
    for (i, f, *outs) in steps:
        print(f"> {i} {f.hex()}")
        if outs and isinstance(outs[0], int):
            outs = [tuple(outs)]
        for (o, g) in outs:
            print(f"< {o} {g.hex()}")
