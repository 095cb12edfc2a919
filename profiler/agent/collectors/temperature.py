"""``thermal``: each temperature sensor's hottest reading."""

from __future__ import annotations

import psutil

from .base import Collector, Field, Sample, Unavailable


class Temperature(Collector):
    FIELDS = (Field("thermal", "temp_c", "°C", "the sensor's hottest reading"),)
    TAGS = {"sensor": "thermal: the sensor's name (e.g. cpu_thermal)"}

    def __init__(self):
        if not hasattr(psutil, "sensors_temperatures") or not psutil.sensors_temperatures():
            raise Unavailable("temperature sensors")

    def collect(self) -> list[Sample]:
        samples: list[Sample] = []
        for sensor, readings in sorted(psutil.sensors_temperatures().items()):
            if readings:
                samples.append(("thermal", {"sensor": sensor},
                                {"temp_c": float(max(r.current for r in readings))}))
        return samples
