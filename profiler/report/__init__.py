"""What a finished (or interrupted) sweep did, offline: ``edgeprof report`` and ``compare``.

``sweep_data`` reads a sweep folder (records, spools), ``figures`` draws with matplotlib,
``study`` sets the published numbers of Park, Lee & Kim (2019) beside matching cells,
``html`` writes one self-contained page, ``compare`` sets two sweeps side by side.
"""
