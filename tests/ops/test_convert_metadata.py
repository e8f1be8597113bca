"""convert keeps a state dict's `_metadata` (module versions load_state_dict reads), legacy -> zip included."""

from __future__ import annotations

import pytest
import torch

from ckinspect.cli import main


@pytest.mark.parametrize("legacy", [True, False])
def test_metadata_survives_convert(tmp_path, capsys, legacy):
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2))
    state = net.state_dict()
    source = tmp_path / "old.pth"
    torch.save(state, source, _use_new_zipfile_serialization=not legacy)
    out = tmp_path / "new.pth"
    assert main(["convert", str(source), str(out)]) == 0
    capsys.readouterr()
    loaded = torch.load(out, weights_only=True)
    assert type(loaded) is type(state)
    assert loaded._metadata == state._metadata and loaded._metadata["1"]["version"] == 2
    assert list(loaded) == list(state) and all(torch.equal(loaded[k], state[k]) for k in state)
