"""The parity cases run with torch's default (non-deterministic) kernels.

Lightning's ``Trainer(deterministic=True)`` (tests/integrations) turns ``torch.use_deterministic_algorithms`` on
for the whole process and leaves it on; with it, ``torch.load`` fills each new storage and has no fill for the
bits and float4 dtypes ("fill_empty_deterministic_ not implemented"), so a case could fail by test order alone.
"""

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _default_kernels() -> Iterator[None]:
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(False)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)
