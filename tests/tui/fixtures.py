"""Hand-built Checkpoints for the TUI tests: a small trainer-shaped resume file whose storages
live in a real raw file (so value statistics can be computed), and a 50,000-tensor one.

Displayed paths are fixed and relative (`runs/demo/...`) so snapshots do not depend on the host;
only the storage bytes go to a temporary folder, which is never drawn.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ckinspect.model import Checkpoint, Finding, StorageInfo, TensorInfo

DEMO_PATH = Path("runs/demo/step_30_resume.pth")
DEMO_B_PATH = Path("runs/demo/step_60_resume.pth")


def _contiguous_stride(shape: tuple[int, ...]) -> tuple[int, ...]:
    stride, acc = [], 1
    for size in reversed(shape):
        stride.append(acc)
        acc *= size
    return tuple(reversed(stride))


def _param_shapes(
    dim: int = 64, layers: int = 2, vocab: int = 256, hidden: int = 172
) -> list[tuple[str, tuple[int, ...]]]:
    shapes: list[tuple[str, tuple[int, ...]]] = [("tok_embeddings.weight", (vocab, dim))]
    for i in range(layers):
        p = f"layers.{i}"
        shapes += [
            (f"{p}.attention_norm.weight", (dim,)),
            (f"{p}.attn.wq.weight", (dim, dim)),
            (f"{p}.attn.wk.weight", (dim // 2, dim)),
            (f"{p}.attn.wv.weight", (dim // 2, dim)),
            (f"{p}.attn.wo.weight", (dim, dim)),
            (f"{p}.ffn_norm.weight", (dim,)),
            (f"{p}.mlp.w1.weight", (hidden, dim)),
            (f"{p}.mlp.w2.weight", (dim, hidden)),
            (f"{p}.mlp.w3.weight", (hidden, dim)),
        ]
    shapes.append(("norm.weight", (dim,)))
    return shapes


def demo_checkpoint(
    data_dir: Path,
    *,
    path: Path = DEMO_PATH,
    seed: int = 0,
    nudge: float = 0.0,
    drop: tuple[str, ...] = (),
    extra: bool = False,
    with_findings: bool = True,
) -> Checkpoint:
    """A resume file as the bundled trainer writes it: fp32 weights (output tied to the embedding),
    AdamW moments and per-parameter steps, RNG states, step/epoch/world_size metadata.

    `nudge` shifts every model weight by that much (a later step of the same run), `drop`
    leaves tensors out and `extra` adds one, to exercise the diff screen.
    """
    rng = np.random.default_rng(seed)
    blob = bytearray()
    storages: dict[str, StorageInfo] = {}
    tensors: list[TensorInfo] = []
    raw_file = data_dir / f"{path.stem}.bin"

    def add(name: str, group: str, values: np.ndarray, dtype: str = "float32", storage_key: str | None = None) -> None:
        shape = tuple(values.shape)
        if storage_key is None:
            storage_key = str(len(storages))
            raw = values.tobytes()
            storages[storage_key] = StorageInfo(
                storage_key, dtype, len(raw), raw_file, len(blob), member=f"archive/data/{storage_key}"
            )
            blob.extend(raw)
        if name not in drop:
            tensors.append(TensorInfo(name, dtype, shape, _contiguous_stride(shape), storage_key, 0, group))

    params = _param_shapes()
    weights = {}
    for name, shape in params:
        scale = 1.0 if name.endswith("norm.weight") else 0.02
        values = (rng.standard_normal(shape) * scale + (1.0 if scale == 1.0 else 0.0)).astype(np.float32)
        weights[name] = values + np.float32(nudge)
    weights["layers.1.mlp.w2.weight"][0, :3] = [np.nan, np.inf, 70000.0] if with_findings else 0.0
    weights["layers.0.attn.wo.weight"][1, 1] = 80000.0 if with_findings else 0.0
    embed_key = None
    for name, _ in params:
        add(f"model.{name}", "model", weights[name])
        if name == "tok_embeddings.weight":
            embed_key = str(len(storages) - 1)
    add("model.output.weight", "model", weights["tok_embeddings.weight"], storage_key=embed_key)  # tied
    for index, (name, _) in enumerate(params):
        add(f"optimizer.state.{index}.exp_avg", "optimizer", (weights[name] * 0.1).astype(np.float32))
        add(f"optimizer.state.{index}.exp_avg_sq", "optimizer", np.abs(weights[name] * 0.01).astype(np.float32))
        add(f"optimizer.state.{index}.step", "optimizer", np.array(30.0, dtype=np.float32))
    add("rng.torch", "rng", rng.integers(0, 255, 5056).astype(np.uint8), dtype="uint8")
    add("rng.data_generator", "rng", rng.integers(0, 255, 5056).astype(np.uint8), dtype="uint8")
    if extra:
        add("model.lm_bias", "model", np.zeros(256, dtype=np.float32))

    data_dir.mkdir(parents=True, exist_ok=True)
    raw_file.write_bytes(bytes(blob))
    ckpt = Checkpoint(
        path=path,
        format="torch-zip",
        file_bytes=len(blob) + 9_214,
        tensors=tensors,
        storages=storages,
        metadata={"step": 30, "epoch": 0, "world_size": 1, "config": {"dim": 64, "n_layers": 2, "vocab_size": 256}},
        globals=[
            "collections.OrderedDict",
            "torch._utils._rebuild_tensor_v2",
            "torch.FloatStorage",
            "torch.ByteStorage",
        ],
        layout="trainer",
        files=[path],
    )
    if with_findings:
        ckpt.findings = [
            Finding("NONFINITE", "1 NaN and 1 Inf in model.layers.1.mlp.w2.weight", "model.layers.1.mlp.w2.weight"),
            Finding(
                "FP16_OVERFLOW",
                "2 values beyond float16's range (max |x| 80000) in 2 tensors",
                "model.layers.0.attn.wo.weight",
            ),
            Finding(
                "LEFTOVER_TMP", "step_30_resume.pth.tmp beside it: an interrupted save (tmp incomplete, main intact)"
            ),
            Finding("LAYOUT", "recognised the bundled trainer's resume layout"),
        ]
    return ckpt


def big_checkpoint(count: int = 50_000) -> Checkpoint:
    """`count` tensors across model/optimizer groups, no bytes behind them (listing and sorting only)."""
    tensors: list[TensorInfo] = []
    storages: dict[str, StorageInfo] = {}
    raw_file = Path("runs/big/big.bin")
    offset = 0
    for i in range(count):
        group = "model" if i % 3 == 0 else "optimizer"
        layer, kind = divmod(i, 30)
        shape = (64 + (i * 37) % 960, 64 + (i * 11) % 192)
        name = f"model.layers.{layer}.block.w{kind}.weight" if group == "model" else f"optimizer.state.{i}.exp_avg"
        key = str(i)
        nbytes = shape[0] * shape[1] * 4
        storages[key] = StorageInfo(key, "float32", nbytes, raw_file, offset)
        offset += nbytes
        tensors.append(TensorInfo(name, "float32", shape, (shape[1], 1), key, 0, group))
    return Checkpoint(
        Path("runs/big/big_resume.pth"), "torch-zip", offset, tensors, storages, {"step": 1000}, layout="trainer"
    )
