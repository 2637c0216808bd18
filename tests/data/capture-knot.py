#!/usr/bin/env python3
"""Captures Knot DNS's answers to hand-built queries, for tests/data/client-queries.hex.

Runs knotd on loopback (127.0.0.1 and ::1, port 53530) serving prod.coreha.example.zone, sends
each query below over UDP, and prints the query and Knot's answer in the file's format
(a "## heading" line, then "0<TAB>query hex" and "1<TAB>answer hex"). Needs knotd in PATH.

    python3 tests/data/capture-knot.py >> tests/data/client-queries.hex
"""
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

PORT = 53530
HERE = os.path.dirname(os.path.abspath(__file__))
ZONE = os.path.join(HERE, "prod.coreha.example.zone")


def name(text):
    out = b""
    for label in text.rstrip(".").split("."):
        out += bytes([len(label)]) + label.encode()
    return out + b"\0"


def query(ident, qname, qtype, edns=None, options=b""):
    """A query with RD clear; edns = (payload size, DO bit) adds an OPT record."""
    header = struct.pack(">HHHHHH", ident, 0, 1, 0, 0, 1 if edns else 0)
    q = header + name(qname) + struct.pack(">HH", qtype, 1)
    if edns:
        payload, do = edns
        q += b"\0" + struct.pack(">HHBBHH", 41, payload, 0, 0, 0x8000 if do else 0, len(options))
        q += options
    return q


COOKIE = struct.pack(">HH", 10, 8) + bytes.fromhex("0123456789abcdef")
A, AAAA = 1, 28

CAPTURES = [
    ("knot NXDOMAIN, A with EDNS and a client cookie",
     socket.AF_INET, query(0x1101, "nope.ingress.prod.coreha.example", A, (1232, False), COOKIE)),
    ("knot NXDOMAIN, AAAA without EDNS",
     socket.AF_INET, query(0x1102, "nope.prod.coreha.example", AAAA)),
    ("knot two AAAA records, EDNS without options",
     socket.AF_INET, query(0x1103, "v6.ns1.prod.coreha.example", AAAA, (1232, False))),
    ("knot A, EDNS without options, DO set",
     socket.AF_INET, query(0x1104, "svc1.ns1.prod.coreha.example", A, (4096, True))),
    ("knot A over IPv6, EDNS without options",
     socket.AF_INET6, query(0x1105, "default-nginx.ingress.prod.coreha.example", A, (1232, False))),
    ("knot NXDOMAIN over IPv6, AAAA with EDNS",
     socket.AF_INET6, query(0x1106, "gone.ns1.prod.coreha.example", AAAA, (1232, False))),
]


def exchange(family, q):
    host = "127.0.0.1" if family == socket.AF_INET else "::1"
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.settimeout(2)
        s.connect((host, PORT))
        s.send(q)
        return s.recv(65535)


def main():
    if shutil.which("knotd") is None:
        sys.exit("knotd not found")
    with tempfile.TemporaryDirectory() as d:
        conf = os.path.join(d, "knot.conf")
        with open(conf, "w") as f:
            f.write(
                f"server:\n  listen: [127.0.0.1@{PORT}, ::1@{PORT}]\n  rundir: {d}\n"
                f"database:\n  storage: {d}\n"
                "zone:\n  - domain: prod.coreha.example\n"
                f"    file: {ZONE}\n    journal-content: none\n    zonefile-sync: -1\n"
            )
        knot = subprocess.Popen(
            ["knotd", "-c", conf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            version = subprocess.run(["knotd", "--version"], capture_output=True, text=True)
            deadline = time.time() + 20
            while True:
                try:
                    exchange(socket.AF_INET, query(1, "prod.coreha.example", 6))
                    break
                except OSError:
                    if time.time() > deadline:
                        sys.exit("knotd did not start")
                    time.sleep(0.1)
            print(f"# Captured with tests/data/capture-knot.py from {version.stdout.strip()}")
            for heading, family, q in CAPTURES:
                print(f"## {heading}")
                print(f"0\t{q.hex()}")
                print(f"1\t{exchange(family, q).hex()}")
        finally:
            knot.terminate()
            knot.wait()


if __name__ == "__main__":
    main()
