"""``edgeprof predict``: a finished sweep's cells fitted to a step model per
configuration, then asked about device counts, boards and links nobody measured
(docs/predict.md): ``cells`` reads the sweep, ``scheme`` says how each exchange moves
its bytes, ``fit`` is the least squares and its interval, ``model`` the step model,
``boards`` the boards and links asked for, ``table`` the output, ``check`` a prediction
beside a measured cell it did not see."""
