"""Where the time of each step went: per-step breakdowns, cell summaries and traces."""
