"""The marker payload contract: encode/decode round trip, version checks, legacy PyProf dicts."""

from __future__ import annotations

import pytest

from pyprof import markers


def test_round_trip_keeps_prefix_and_fields():
    payload = markers.make("op", ns="torch.nn.functional", op="conv2d",
                           args=[{"name": "input", "type": "tensor", "shape": [8, 3, 32, 32], "dtype": "float32"}])
    text = markers.encode(payload)
    assert text.startswith(markers.PREFIX)
    assert markers.is_pyprof(text)
    back = markers.decode(text)
    assert back == payload
    assert back["args"][0]["shape"] == [8, 3, 32, 32]


@pytest.mark.parametrize("text, problem", [
    ('{"pyprof":1,"k":"op"', "not JSON"),
    ('{"pyprof":"one","k":"op"}', "bad version"),
    ('{"pyprof":1,"k":"teapot"}', "unknown kind"),
    ('[1,2]', "no 'pyprof' version key"),
])
def test_malformed_markers_name_the_problem(text, problem):
    with pytest.raises(markers.MarkerError, match=problem):
        markers.decode(text)


def test_newer_schema_asks_for_upgrade():
    with pytest.raises(markers.MarkerError, match="upgrade pyprof-torch"):
        markers.decode('{"pyprof":99,"k":"op"}')


def test_legacy_pyprof_dict_read_without_eval():
    # A real marker text from the DLProf corpus export (MohanadOdema/DLProf, nsys 2022.1).
    text = ("{'mod': 'Tensor', 'op': 'uniform_', 'args': [{'name': '', 'type': 'tensor', "
            "'shape': (6, 3, 3, 3), 'dtype': 'float32'}]}")
    assert markers.is_legacy_pyprof(text)
    value = markers.decode_legacy_pyprof(text)
    assert value["mod"] == "Tensor" and value["op"] == "uniform_"
    assert value["args"][0]["shape"] == [6, 3, 3, 3]  # tuples become lists


def test_legacy_reader_refuses_code():
    with pytest.raises(markers.MarkerError):
        markers.decode_legacy_pyprof("{'mod': __import__('os').system('true')}")


def test_layer_names():
    assert markers.layer_name("layer:conv1") == "conv1"
    assert markers.layer_name("layer:") is None
    assert markers.layer_name("conv1") is None
