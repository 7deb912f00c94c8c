#!/usr/bin/env python3
"""Per-request server latency as seen on the wire, a clock independent of any load generator.

Reads a pcap of loopback traffic (tcpdump -i lo -w FILE, Ethernet framing, IPv4) and, for each
client connection to PORT, times every request from its first payload packet to the last
payload packet of the answer (the packet before the client's next request). Works for HTTP/1.1
keep-alive and for anything else that is strictly request/answer on a connection.

The kernel stamps a loopback packet when the sender hands it to the device, so these times
leave out both the client's own work and its wake-ups: what a load generator adds on top of
them is its own contribution to the latency it reports.

Usage: wire_latency.py PCAP PORT   (prints the count and P50/P90/P99 in ms)
"""
import struct
import sys


def request_latencies_us(pcap_path, port):
    """Sorted list of per-request latencies in microseconds."""
    lat = []
    conns = {}  # client port -> [state, t_request, t_last_answer]; state 0 idle, 1 sent, 2 answering
    with open(pcap_path, "rb") as f:
        head = f.read(24)
        if len(head) < 24:
            return []
        magic = struct.unpack("<I", head[:4])[0]
        if magic not in (0xA1B2C3D4, 0xA1B23C4D):
            raise SystemExit(f"{pcap_path}: not a little-endian pcap file (magic {magic:#x})")
        frac_s = 1e-9 if magic == 0xA1B23C4D else 1e-6
        linktype = struct.unpack("<I", head[20:24])[0]
        if linktype != 1:
            raise SystemExit(f"{pcap_path}: link type {linktype}, expected Ethernet (capture with -i lo)")
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                break
            sec, frac, incl, _ = struct.unpack("<IIII", rec)
            data = f.read(incl)
            t = sec + frac * frac_s
            ip = data[14:]
            if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
                continue
            ihl = (ip[0] & 15) * 4
            total = struct.unpack(">H", ip[2:4])[0]
            tcp = ip[ihl:]
            if len(tcp) < 20:
                continue
            sport, dport = struct.unpack(">HH", tcp[:4])
            payload = total - ihl - (tcp[12] >> 4) * 4
            if payload <= 0:
                continue
            if dport == port:
                c = conns.setdefault(sport, [0, 0.0, 0.0])
                if c[0] == 2:
                    lat.append(c[2] - c[1])
                if c[0] != 1:
                    c[0], c[1] = 1, t
            elif sport == port:
                c = conns.get(dport)
                if c and c[0] in (1, 2):
                    c[0], c[2] = 2, t
    for c in conns.values():
        if c[0] == 2:
            lat.append(c[2] - c[1])
    return sorted(int(round(x * 1e6)) for x in lat)


def percentile(sorted_us, p):
    """The value at percentile p (0-100) by nearest rank, in seconds."""
    if not sorted_us:
        return None
    rank = max(1, int(round(p / 100.0 * len(sorted_us) + 0.5)))
    return sorted_us[min(rank, len(sorted_us)) - 1] / 1e6


def wrk_corrected(sorted_us, interval_us):
    """The samples re-weighted by wrk 4's coordinated-omission rule (stats_correct): each value
    v also counts v-i, v-2i, ... while the value stays above i. Returns a new sorted list."""
    out = list(sorted_us)
    if interval_us >= 1:
        for v in sorted_us:
            m = v - interval_us
            while m > interval_us:
                out.append(m)
                m -= interval_us
    out.sort()
    return out


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__.strip().splitlines()[-1])
    xs = request_latencies_us(sys.argv[1], int(sys.argv[2]))
    fmt = lambda p: f"{percentile(xs, p) * 1e3:.3f}" if xs else "n/a"
    print(f"requests {len(xs)}  p50 {fmt(50)} ms  p90 {fmt(90)} ms  p99 {fmt(99)} ms")
