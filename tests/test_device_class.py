"""DeviceClass members stand for their strings everywhere a string went before (issue 32 item 3)."""

from __future__ import annotations

import pickle

import pytest

from raytile.common.device_class import DeviceClass
from raytile.common.udf import UDFMethod


@pytest.mark.parametrize("member, text", [(DeviceClass.CPU, "cpu"), (DeviceClass.CUDA, "cuda"),
                                          (DeviceClass.ANY, "any"), (UDFMethod.TILE, "tile")])
def test_members_act_as_their_strings(member, text):
    assert member == text and hash(member) == hash(text)
    assert {text: 1}[member] == 1 and member in {text} and text in {member}
    assert f"{member}" == str(member) == text and f"{member:>5}" == f"{text:>5}"
    assert repr([member]) == repr([text])  # messages that list them read as before
    assert pickle.loads(pickle.dumps(member)) is member  # a task's device class crosses to a worker intact
    assert type(member)(text) is member


def test_an_unknown_device_class_is_refused():
    with pytest.raises(ValueError, match="'gpu'"):
        DeviceClass("gpu")
