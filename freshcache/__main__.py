"""``python -m freshcache``: the ``freshcache`` command, for an interpreter without the
script on its ``PATH`` (a driver starting the proxy with ``sys.executable``)."""

from ._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
