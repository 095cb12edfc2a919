"""How the agent and ``edgeprof ship`` log: INFO and above on stderr, with the time and
the logger's name (a node's journal, or the terminal)."""

from __future__ import annotations

import logging


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
