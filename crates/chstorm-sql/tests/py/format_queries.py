"""ClickHouse 26.9's parser (chdb-core 26.9) as an oracle: reads one statement per line of stdin
(hex of its bytes), writes one line per statement: `OK <hex of formatQuerySingleLine's text>`, or
`ERR <ClickHouse error code>` when 26.9 does not parse it.

Parsed as a server parses a query: `implicit_select = 0` (the server's default; clickhouse-local,
which chdb embeds, turns it on, and then reads `DROP a` as `SELECT DROP AS a`).
"""
import re
import sys

from chdb import session

s = session.Session()
s.query("SET implicit_select = 0")
for line in sys.stdin:
    sql = bytes.fromhex(line.strip()).decode("utf-8", "surrogateescape")
    try:
        # The statement as a string literal: backslashes and quotes escaped, bytes kept.
        lit = "'" + sql.replace("\\", "\\\\").replace("'", "\\'") + "'"
        out = s.query(f"SELECT formatQuerySingleLine({lit})", "TSVRaw")
        text = out.bytes().decode("utf-8", "surrogateescape").rstrip("\n")
        print("OK", text.encode("utf-8", "surrogateescape").hex(), flush=False)
    except Exception as e:  # chdb raises its own error type for a ClickHouse exception
        m = re.search(r"Code: (\d+)", str(e))
        print("ERR", m.group(1) if m else "0")
sys.stdout.flush()
