"""Shared fixtures for the PyTorch contract tests.

`torch_defaults` is opted into per module (`pytestmark = pytest.mark.usefixtures(...)`) rather
than autouse, so test folders that do not need torch are left alone.
"""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def torch_defaults():
    """A fixed global seed (reproducible model init) and one intra-op thread.

    The models under test are tiny: a second OpenMP thread buys nothing, and when anything else
    runs on a 2-core machine its spin-waits slow these tests down many times over (measured: the
    training tests took 54 s on one thread and 890 s on two under the same background load).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(threads)
