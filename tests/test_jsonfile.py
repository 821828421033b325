"""qknorm.jsonfile: JSON whole, gzip where the name ends in .gz, the same bytes for the same data."""

from __future__ import annotations

import gzip
import json

from qknorm import jsonfile


def test_a_gz_name_writes_gzip_that_reads_back_and_repeats_byte_for_byte(tmp_path):
    data = {"landscapes": {"bowl": {"racing": [{"seed": 0, "best_p": float("inf")}]}}}
    first, second = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    jsonfile.write(first, data)
    jsonfile.write(second, data)
    assert gzip.decompress(first.read_bytes()).decode() == json.dumps(data, indent=1) + "\n"
    assert first.read_bytes() == second.read_bytes()  # no time stamp, no file name inside
    assert jsonfile.read(first) == data


def test_a_plain_name_writes_text(tmp_path):
    path = tmp_path / "a.json"
    jsonfile.write(path, [1, 2], indent=None)
    assert path.read_text() == "[1, 2]\n" and jsonfile.read(path) == [1, 2]
