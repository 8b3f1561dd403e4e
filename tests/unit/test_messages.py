"""Messages between actors: typed, and a misspelled callback method fails where it is written."""

from __future__ import annotations

import pytest

from korral import si
from korral.actors.messages import CALLBACK_METHODS, Deliver
from korral.callback import ResourceManagerCallback


def test_deliver_refuses_a_method_the_rm_callback_does_not_have() -> None:
    with pytest.raises(ValueError, match="update_alocation"):
        Deliver(method="update_alocation", argument=si.AllocationResponse())


def test_every_callback_method_the_core_delivers_exists_on_the_callback() -> None:
    for method in CALLBACK_METHODS:
        assert callable(getattr(ResourceManagerCallback, method))
        Deliver(method=method, argument=None)
