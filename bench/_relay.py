"""A byte relay between its stdin/stdout and a server it starts: `mcp_face.py`'s floor of what
one more process on a call's way costs (two more pipe hops, no parsing).

    python bench/_relay.py SERVER-COMMAND...

Standard library only. It ends when its stdin ends, once the server has exited.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys


def main() -> int:
    server = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None
    to_server, from_server = server.stdin.fileno(), server.stdout.fileno()
    with selectors.DefaultSelector() as selector:
        selector.register(0, selectors.EVENT_READ, to_server)
        selector.register(from_server, selectors.EVENT_READ, 1)
        while True:
            for key, _ in selector.select():
                data = os.read(key.fd, 65536)
                if not data:
                    server.stdin.close()
                    return server.wait()
                os.write(key.data, data)


if __name__ == "__main__":
    sys.exit(main())
