"""Fixtures of the Hugging Face integration tests (the models themselves: `hf_models.py`)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread_and_a_seed():
    """One intra-op thread (tiny models; see tests/conftest.py) and a fixed seed."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(threads)
