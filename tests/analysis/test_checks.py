"""Structural findings from the checkpoint's shape: resume completeness, precision, optimizer fit, bloat."""

import json

from ckinspect.analysis.anatomy import analyze
from ckinspect.analysis.checks import structural_findings
from tests.helpers.checkpoints import PARAM_SHAPES, T, adamw_state, build, model_sd, names_only, trainer_resume


def findings(tree, **kw):
    ckpt = analyze(build(tree, **kw))
    return structural_findings(ckpt)


def codes(found):
    return sorted(f.code for f in found)


def test_complete_trainer_resume_has_no_findings():
    assert findings(trainer_resume()) == []


def test_plain_weights_are_not_a_resume_file():
    assert findings(model_sd("float16")) == []


def test_resume_without_rng_says_so():
    (found,) = findings(trainer_resume(rng=None))
    assert found.code == "RESUME_INCOMPLETE" and found.severity == "warning"
    assert "RNG/data-position" in found.message
    assert "optimizer state (" not in found.message and "step counter (" not in found.message


def test_resume_without_optimizer_and_step_names_both():
    (found,) = findings(trainer_resume(optimizer=None, step=None))
    assert found.code == "RESUME_INCOMPLETE"
    assert "lacks optimizer state" in found.message and "the step counter" in found.message
    assert "has RNG/data-position state" in found.message and "RNG/data-position state (" not in found.message


def test_nanogpt_lacks_rng_state():
    tree = {
        "model": model_sd(),
        "optimizer": adamw_state(),
        "model_args": {},
        "iter_num": 5,
        "best_val_loss": 2.0,
        "config": {},
    }
    (found,) = findings(tree)
    assert found.code == "RESUME_INCOMPLETE" and "RNG/data-position" in found.message


def test_minimind_epoch_and_step_are_its_data_position():
    tree = {"model": model_sd(), "optimizer": adamw_state(), "epoch": 0, "step": 10, "world_size": 1}
    assert findings(tree) == []


def test_lightning_loops_are_a_data_position():
    tree = {"state_dict": model_sd(), "optimizer_states": [adamw_state()], "global_step": 9, "epoch": 0, "loops": {}}
    assert findings(tree) == []


def test_hf_model_file_judges_the_whole_folder(tmp_path):
    folder = tmp_path / "checkpoint-10"
    folder.mkdir()
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 10, "epoch": 0.1}))
    (folder / "optimizer.pt").write_bytes(b"x")
    model = names_only(build(model_sd(), path=folder / "model.safetensors", fmt="safetensors"))
    (found,) = structural_findings(analyze(model))
    assert found.code == "RESUME_INCOMPLETE" and "RNG/data-position" in found.message
    (folder / "rng_state.pth").write_bytes(b"x")
    assert structural_findings(analyze(model)) == []
    # the optimizer file alone is part of the folder: no resume verdict of its own
    assert structural_findings(analyze(build(adamw_state(), path=folder / "optimizer.pt"))) == []


def test_half_precision_master_weights():
    tree = trainer_resume(model=model_sd("bfloat16"))
    (found,) = findings(tree)
    assert found.code == "HALF_PRECISION_RESUME"
    assert "bfloat16" in found.message and "5 of 5" in found.message


def test_optimizer_for_another_model_shape():
    shapes = [(16, 8), (32, 8), (32, 8), (8,)]  # third parameter transposed
    (found,) = findings(trainer_resume(optimizer=adamw_state(shapes)))
    assert found.code == "OPTIMIZER_MISMATCH" and found.severity == "error"
    assert found.tensor == "optimizer.state.2.exp_avg"
    assert "model.layers.0.w2.weight" in found.message and "(32, 8)" in found.message and "(8, 32)" in found.message


def test_optimizer_tracking_more_parameters_than_the_model_has():
    (found,) = findings(trainer_resume(optimizer=adamw_state(PARAM_SHAPES + [(8, 8)], groups=2)))
    assert found.code == "OPTIMIZER_MISMATCH" and "tracks 5 parameters" in found.message and "only 4" in found.message


def test_optimizer_state_for_an_unlisted_parameter():
    opt = adamw_state()
    opt["param_groups"][0]["params"] = [0, 1, 2]
    (found,) = findings(trainer_resume(optimizer=opt))
    assert found.code == "OPTIMIZER_MISMATCH" and "parameters 3" in found.message


def test_buffers_and_frozen_layers_do_not_count_as_mismatch():
    model = dict(model_sd(), **{"rope.freqs": T((4, 2))})  # a persistent buffer, no optimizer state
    opt = adamw_state(PARAM_SHAPES[1:])  # the embedding is frozen
    assert findings(trainer_resume(model=model, optimizer=opt)) == []


def test_dcp_optimizer_state_is_matched_by_name():
    tree = {
        "model": {"layers.0.weight": T((8, 4))},
        "optim": {"state": {"layers.0.weight": {"exp_avg": T((4, 8)), "exp_avg_sq": T((4, 8))}}},
    }
    found = structural_findings(analyze(names_only(build(tree, path="dcp_dir", fmt="dcp"))))
    (mismatch,) = [f for f in found if f.code == "OPTIMIZER_MISMATCH"]
    assert "model.layers.0.weight is (8, 4)" in mismatch.message


def test_storage_bloat_from_a_saved_slice():
    tree = {"embedding_rows": T((10, 1000), storage_numel=1000 * 1000)}
    (found,) = findings(tree)
    assert found.code == "STORAGE_BLOAT" and found.tensor == "embedding_rows"
    assert "3,960,000 bytes" in found.message and "99%" in found.message


def test_small_or_proportionally_small_waste_is_not_bloat():
    assert findings({"x": T((10,), storage_numel=1000)}) == []  # 3.9 KB wasted: under 1 MiB
    big = {"w": T((10_000_000,)), "s": T((1,), storage_numel=300_000)}  # 1.1 MiB wasted of 41 MB: under 10%
    assert findings(big) == []


def test_weights_with_a_step_in_their_metadata_are_not_a_resume_file():
    ckpt = names_only(build(model_sd("bfloat16"), path="model.safetensors", fmt="safetensors"))
    ckpt.metadata.update({"step": "1000", "format": "pt"})
    assert structural_findings(analyze(ckpt)) == []


def test_odd_optimizer_trees_do_not_crash_the_checks():
    odd = {
        "state": {0: "not a dict", (1, 2): {"exp_avg": T((3,))}},
        "param_groups": [{"params": [[0], 0]}, "x", {"params": None}],
    }
    found = findings(trainer_resume(optimizer=odd))
    assert [f.code for f in found] == ["OPTIMIZER_MISMATCH"]  # state for (1, 2), which no group lists


def test_hf_optimizer_file_against_the_model_file_beside_it(tmp_path):
    import torch
    from safetensors.torch import save_file

    folder = tmp_path / "checkpoint-3"
    folder.mkdir()
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 3}))
    save_file(
        {
            "emb.weight": torch.zeros(16, 8),
            "w1.weight": torch.zeros(32, 8),
            "w2.weight": torch.zeros(8, 32),
            "norm.weight": torch.zeros(8),
        },
        folder / "model.safetensors",
    )
    good = analyze(build(adamw_state(), path=folder / "optimizer.pt"))
    assert structural_findings(good) == []
    stale = analyze(build(adamw_state([(16, 8), (32, 8), (8, 64), (8,)]), path=folder / "optimizer.pt"))
    (found,) = structural_findings(stale)
    assert found.code == "OPTIMIZER_MISMATCH" and "(8, 64)" in found.message and "model.safetensors" in found.message
