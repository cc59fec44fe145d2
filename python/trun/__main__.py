"""``python -m trun ARGS``: the trun command line (the binary this package carries)."""

import os
import sys

from trun._binary import trun_binary


def main() -> None:
    path = trun_binary()
    os.execv(path, [path, *sys.argv[1:]])


if __name__ == "__main__":
    main()
