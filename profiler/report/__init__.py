"""What a finished (or interrupted) sweep did, offline: ``edgeprof report`` and ``compare``.

``sweep_data`` reads a sweep folder (records, spools), ``figures`` draws with matplotlib,
``ratios`` reads the study's findings as ratios between cells, ``html`` writes one
self-contained page (from the template ``page.html.j2``), ``compare`` sets two sweeps
side by side. The study's published numbers and the cells that match them come from
``profiler.study.reference``; times of dilated cells are read through
``profiler.sweep.board_time``.
"""
