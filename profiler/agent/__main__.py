"""``python -m profiler.agent``: the per-node agent, as the cell runner starts it."""

from .cli import agent

if __name__ == "__main__":
    agent(prog_name="edgeprof agent")
