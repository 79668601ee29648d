"""Run localstripe's aiohttp app on 127.0.0.1 only, with its state in a file of our choice.

localstripe's own CLI binds every interface and keeps state in /tmp/localstripe.pickle
(shared with anyone else on the machine); this runner does neither.
Usage: python localstripe_server.py PORT STATE_FILE
"""

import pickle
import sys

from aiohttp import web
from localstripe import resources
from localstripe.server import app


def main() -> None:
    port = int(sys.argv[1])
    state_file = sys.argv[2]

    def dump_to_disk(self):
        with open(state_file, "wb") as f:
            pickle.dump(dict(self), f, protocol=pickle.HIGHEST_PROTOCOL)

    resources.Store.dump_to_disk = dump_to_disk
    resources.Store.try_load_from_disk = lambda self: None
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


if __name__ == "__main__":
    main()
