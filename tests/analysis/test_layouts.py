"""Layout recognisers: known checkpoint shapes map onto model / optimizer / rng / other and metadata."""

import json
from collections import Counter

from ckinspect.analysis.anatomy import analyze
from tests.helpers.checkpoints import T, adamw_state, build, model_sd, names_only, trainer_resume


def groups(ckpt):
    return {t.name: t.group for t in ckpt.tensors}


def group_counts(ckpt):
    return Counter(t.group for t in ckpt.tensors)


def test_bundled_trainer():
    ckpt = analyze(build(trainer_resume()))
    assert ckpt.layout == "trainer"
    assert group_counts(ckpt) == {"model": 5, "optimizer": 12, "rng": 1}
    assert groups(ckpt)["rng.torch"] == "rng"
    assert ckpt.metadata["step"] == 30 and ckpt.metadata["epoch"] == 1 and ckpt.metadata["world_size"] == 1
    assert ckpt.metadata["config"] == {"dim": 8, "n_layers": 1, "vocab_size": 16}
    assert ckpt.metadata["format"] == "ckinspect-trainer/1"


def test_minimind():
    tree = {
        "model": model_sd(),
        "optimizer": adamw_state(),
        "epoch": 2,
        "step": 500,
        "world_size": 2,
        "wandb_id": "abc",
    }
    ckpt = analyze(build(tree))
    assert ckpt.layout == "minimind"
    assert group_counts(ckpt) == {"model": 5, "optimizer": 12}
    assert (ckpt.metadata["step"], ckpt.metadata["epoch"], ckpt.metadata["world_size"]) == (500, 2, 2)
    assert ckpt.metadata["wandb_id"] == "abc"


def test_nanogpt_with_compiled_prefixes():
    sd = {f"_orig_mod.{k}": v for k, v in model_sd().items()}
    tree = {
        "model": sd,
        "optimizer": adamw_state(),
        "model_args": {"n_layer": 1, "n_embd": 8},
        "iter_num": 2000,
        "best_val_loss": 1.4697,
        "config": {"batch_size": 12, "learning_rate": 6e-4},
    }
    ckpt = analyze(build(tree))
    assert ckpt.layout == "nanogpt"
    assert groups(ckpt)["model._orig_mod.emb.weight"] == "model"
    assert ckpt.metadata["step"] == 2000 and ckpt.metadata["best_val_loss"] == 1.4697
    assert ckpt.metadata["config"] == {"n_layer": 1, "n_embd": 8}
    assert ckpt.metadata["train_config"]["batch_size"] == 12


def test_lightning():
    tree = {
        "epoch": 3,
        "global_step": 1200,
        "pytorch-lightning_version": "2.4.0",
        "state_dict": model_sd(),
        "loops": {"fit_loop": {"epoch_loop.batch_progress": {"total": {"ready": 1200}}}},
        "callbacks": {},
        "optimizer_states": [adamw_state()],
        "lr_schedulers": [{"last_epoch": 1200}],
        "hyper_parameters": {"lr": 3e-4},
    }
    ckpt = analyze(build(tree))
    assert ckpt.layout == "lightning"
    assert groups(ckpt)["optimizer_states.0.state.2.exp_avg_sq"] == "optimizer"
    assert group_counts(ckpt) == {"model": 5, "optimizer": 12}
    assert ckpt.metadata["step"] == 1200 and ckpt.metadata["epoch"] == 3
    assert ckpt.metadata["config"] == {"lr": 3e-4}


def _hf_folder(tmp_path, files=("model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth")):
    folder = tmp_path / "checkpoint-500"
    folder.mkdir()
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 500, "epoch": 1.5, "max_steps": 1000}))
    for name in files:
        (folder / name).write_bytes(b"x")
    return folder


def test_hf_trainer_folder_files(tmp_path):
    folder = _hf_folder(tmp_path)
    model = analyze(names_only(build(model_sd(), path=folder / "model.safetensors", fmt="safetensors")))
    assert model.layout == "hf-trainer" and set(groups(model).values()) == {"model"}
    assert model.metadata["step"] == 500 and model.metadata["epoch"] == 1.5 and model.metadata["max_steps"] == 1000
    opt = analyze(build(adamw_state(), path=folder / "optimizer.pt"))
    assert opt.layout == "hf-trainer" and set(groups(opt).values()) == {"optimizer"}
    rng = analyze(
        build({"python": (3, (), None), "numpy": None, "cpu": T((5056,), "uint8")}, path=folder / "rng_state.pth")
    )
    assert rng.layout == "hf-trainer" and set(groups(rng).values()) == {"rng"}


def test_dcp_folder_names_only():
    tensors = {
        "model": {"layers.0.weight": T((8, 8))},
        "optim": {"state": {"layers.0.weight": {"exp_avg": T((8, 8)), "exp_avg_sq": T((8, 8)), "step": T(())}}},
    }
    ckpt = analyze(names_only(build(tensors, path="ckpt_dir", fmt="dcp")))
    assert ckpt.layout == "dcp"
    assert groups(ckpt) == {
        "model.layers.0.weight": "model",
        "optim.state.layers.0.weight.exp_avg": "optimizer",
        "optim.state.layers.0.weight.exp_avg_sq": "optimizer",
        "optim.state.layers.0.weight.step": "optimizer",
    }


def test_dcp_app_state_nesting():
    tree = {"app": {"model": {"w": T((4,))}, "optim": {"state": {"w": {"exp_avg": T((4,))}}}, "step": 7}}
    ckpt = analyze(build(tree, path="ckpt_dir", fmt="dcp"))
    assert groups(ckpt) == {"app.model.w": "model", "app.optim.state.w.exp_avg": "optimizer"}
    assert ckpt.metadata["step"] == 7


def test_plain_state_dict_is_all_model_even_integer_buffers():
    sd = dict(model_sd(), **{"bn.num_batches_tracked": T((), "int64")})
    ckpt = analyze(build(sd))
    assert ckpt.layout == "state_dict" and set(groups(ckpt).values()) == {"model"}


def test_safetensors_weights_are_model():
    ckpt = analyze(names_only(build(model_sd("bfloat16"), path="model.safetensors", fmt="safetensors")))
    assert ckpt.layout == "state_dict" and set(groups(ckpt).values()) == {"model"}


def test_hand_rolled_resume_dict():
    tree = {"model_state_dict": model_sd(), "optimizer_state_dict": adamw_state(), "epoch": 4, "loss": 0.25}
    ckpt = analyze(build(tree))
    assert ckpt.layout == "resume"
    assert group_counts(ckpt) == {"model": 5, "optimizer": 12}
    assert ckpt.metadata["epoch"] == 4 and ckpt.metadata["loss"] == 0.25


def test_unknown_shapes_are_grouped_by_name():
    tree = {
        "encoder": {"w": T((4, 4))},
        "ckpt_meta": {"counter": T((), "int64")},
        "opt_blob": {"state": {"3": {"exp_avg": T((4, 4)), "step": T(())}}},
        "extra": {"cuda_rng_state": T((16,), "uint8"), "generator": T((5056,), "uint8")},
        "gan": {"generator": {"conv": T((3, 3))}},
    }
    ckpt = analyze(build(tree))
    assert ckpt.layout == "unknown"
    assert groups(ckpt) == {
        "encoder.w": "model",
        "ckpt_meta.counter": "other",
        "opt_blob.state.3.exp_avg": "optimizer",
        "opt_blob.state.3.step": "optimizer",
        "extra.cuda_rng_state": "rng",
        "extra.generator": "rng",
        "gan.generator.conv": "model",  # a GAN generator's weights, not a torch.Generator state
    }


def test_flat_safetensors_tree_with_optimizer_names_is_not_all_model():
    ckpt = build(
        {"model.w": T((4, 4)), "optimizer.state.0.exp_avg": T((4, 4))}, path="x.safetensors", fmt="safetensors"
    )
    ckpt.tree = {t.name: t for t in ckpt.tensors}  # as the safetensors reader leaves it
    ckpt.metadata["step"] = "12"  # safetensors metadata is strings
    analyze(ckpt)
    assert groups(ckpt) == {"model.w": "model", "optimizer.state.0.exp_avg": "optimizer"}
    assert ckpt.metadata["step"] == 12


def test_flat_safetensors_tree_of_weights_is_a_state_dict():
    ckpt = build(model_sd(), path="m.safetensors", fmt="safetensors")
    ckpt.tree = {t.name: t for t in ckpt.tensors}
    assert analyze(ckpt).layout == "state_dict"


def test_rng_file_by_name():
    ckpt = analyze(build({"cpu": T((5056,), "uint8"), "cuda": T((16,), "uint8")}, path="run/rng_state_3.pth"))
    assert ckpt.layout == "rng" and set(groups(ckpt).values()) == {"rng"}


def test_role_name_prefilter_agrees_with_the_full_search():
    from ckinspect.analysis.layouts import _ROLE_NAMES, OPTIMIZER_KEYS, _names_a_role

    names = [
        "layers.0.w",
        "dropout.p",
        "Optimizer.state.0.exp_avg",
        "a.OPT.b",
        "x.state.y",
        "cuda_RNG",
        "np.Random_State",
        "gan.Generator.w",
        "optimizers",
        "weights.\u212a",
        "\u017ftate.0.w",
        "opt_state_x",
        "adapter.up",
    ]
    names += [f"m.{key.upper()}.w" for key in OPTIMIZER_KEYS]
    for name in names:
        for text in (name, "model.a\n" + name, "model.a\nmodel.b"):
            assert _names_a_role(text) == (_ROLE_NAMES.search(text) is not None), text
