#!/usr/bin/env python3
"""A fake HTTP server with a known latency, for checking a load generator's clock: every answer is
chunked and sent in two segments 1 ms apart (like a ClickHouse answer can be). Usage: split_server.py PORT."""
import asyncio, sys
async def handle(r, w):
    try:
        while True:
            head = await r.readuntil(b"\r\n\r\n")
            n = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    n = int(line.split(b":")[1])
            if n:
                await r.readexactly(n)
            w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n1\n\r\n")
            await w.drain()
            await asyncio.sleep(0.001)
            w.write(b"0\r\n\r\n")
            await w.drain()
    except Exception:
        w.close()
async def main():
    s = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]))
    async with s:
        await s.serve_forever()
asyncio.run(main())
