"""The spool's line protocol: byte-identical to influxdb-client's, and readable back."""

import math

import pytest
from influxdb_client import Point, WritePrecision

from profiler.agent import lineproto

CASES = [
    ("cpu", {"host": "pi-1", "role": "scheduler+server"}, {"cpu_percent": 12.5, "cores": 4}),
    ("net", {"interface": "my eth,0=x", "zz": "a\\"}, {"sent_bytes": 10, "ok": True,
                                                        "x": 100.0, "nan": math.nan}),
    ("m", {}, {"f": -0.25, "big": 2**62, "off": False}),
    ("thermal", {"sensor": "cpu thermal", "empty": ""}, {"temp_c": 48.312}),
]


@pytest.mark.parametrize("measurement,tags,fields", CASES)
def test_encode_matches_influxdb_client(measurement, tags, fields):
    point = Point(measurement)
    for key, value in tags.items():
        point.tag(key, value)
    for key, value in fields.items():
        point.field(key, value)
    point.time(1700000000123, WritePrecision.MS)
    assert lineproto.encode(measurement, tags, fields, 1700000000123) == point.to_line_protocol()


def test_no_fields_is_no_line():
    assert lineproto.encode("cpu", {"a": "b"}, {"x": None}, 1) == ""


def test_parse_reads_back_what_encode_wrote():
    tags = {"interface": "my eth,0=x", "role": "worker"}
    fields = {"sent_bytes": 10, "rate": 1.5, "ok": True, "whole": 3.0}
    point = lineproto.parse(lineproto.encode("net", tags, fields, 42))
    assert point.measurement == "net" and point.tags == tags and point.time_ms == 42
    assert point.fields == fields
    assert isinstance(point.fields["sent_bytes"], int)
    assert isinstance(point.fields["whole"], float)


def test_base_tags_go_back_in_at_shipping_time():
    line = lineproto.encode("cpu_core", {"core": "1"}, {"cpu_percent": 5.0}, 7)
    fragment = lineproto.tag_fragment({"host": "a b", "cell": "c1"})
    shipped = lineproto.with_base_tags(line, fragment)
    assert shipped == r"cpu_core,cell=c1,host=a\ b,core=1 cpu_percent=5 7"
    assert lineproto.parse(shipped).tags == {"cell": "c1", "host": "a b", "core": "1"}
    bare = lineproto.encode("load", {}, {"load1": 0.5}, 7)
    assert lineproto.with_base_tags(bare, "node=n1") == "load,node=n1 load1=0.5 7"


def test_header_round_trip():
    line = lineproto.header({"node": "n1", "sweep": "s"})
    assert line.startswith("#") and line.endswith("\n")
    assert lineproto.parse_header(line) == {"node": "n1", "sweep": "s"}
    assert lineproto.parse_header("cpu a=1 2") is None
