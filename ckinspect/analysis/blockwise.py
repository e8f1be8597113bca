"""Logits of a model whose weights stay on disk: block by block, every rounding of a block before the next.

The blocks are the model's own: what runs before its decoder layers (the embeddings), each decoder
layer, and what runs after them (final norm, head). The model is built with its parameters on the meta
device (no memory); a weight is read from the checkpoint, through ckinspect's own readers, when the
module holding it runs, and rounded to the format being measured right there. The reference weights of
the current block stay cached until every format has run through it, then they are dropped:

    for block in (before the layers, layer 0, ..., layer n-1, after the layers):
        for fmt in ("fp32", "fp16", "bf16", ...):      # fp32 first: it reads the block from disk
            hidden[fmt] = block(hidden[fmt], weights rounded to fmt)
        drop the block's weights

Peak memory is one block's float32 weights, one module's rounded copy and the activations, whatever
the model's size. The model's own forward runs the first and the last block: the layers are swapped
for recorders that keep the arguments the forward gives each layer (masks, rotary tables) and stop it
at the last one; for the last block the layers replay their recorded outputs. With `whole=True` the
whole model is one block (all its weights cached): the same code, the same numbers, the figure the
block-wise mode is checked against.

fp8 formats (`fp8_e4m3fn`, `fp8_e5m2`) are simulated: each tensor is scaled so its largest magnitude
lands on the format's largest finite value, rounded, and scaled back (per-tensor scaling).
Imports torch: only logit drift uses this module.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

from ckinspect.dtypes import dtype_info
from ckinspect.io.blobs import Blobs, UnreadableStorage
from ckinspect.io.values import decode, raw_blocks
from ckinspect.vocab import FP8_FORMATS, LOGIT_FORMATS, REFERENCE_FORMAT

if TYPE_CHECKING:
    from ckinspect.analysis.logit_models import LogitModel
    from ckinspect.model import Checkpoint, TensorInfo

_READ_ELEMENTS = 1 << 20  # a weight is read in blocks of this many elements, straight into its tensor
_ROUND_ELEMENTS = 1 << 20  # and rounded in chunks of this many: no narrow copy of a whole embedding
MAX_NAMED = 3  # weight names quoted in one error line


def torch_dtype(fmt: str) -> Any:
    import torch

    names = {"fp16": "float16", "bf16": "bfloat16", "fp8_e4m3fn": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}
    if fmt not in names:
        raise ValueError(f"unknown format {fmt!r}: one of {', '.join(LOGIT_FORMATS + FP8_FORMATS)}")
    return getattr(torch, names[fmt])


def round_weight(ref: Any, fmt: str) -> Any:
    """float32 `ref` as it reads back after being stored in `fmt` (float32 again)."""
    import torch

    if fmt == REFERENCE_FORMAT:
        return ref
    dtype = torch_dtype(fmt)
    out = torch.empty(ref.shape, dtype=ref.dtype)  # contiguous, whatever the strides of `ref`
    flat, into = ref.reshape(-1), out.view(-1)
    if fmt not in FP8_FORMATS:
        # a chunk at a time: the narrow copy is never as large as the tensor (an embedding, the head)
        for i in range(0, flat.numel(), _ROUND_ELEMENTS):
            into[i : i + _ROUND_ELEMENTS].copy_(flat[i : i + _ROUND_ELEMENTS].to(dtype))
        return out
    if ref.numel() == 0:
        return out
    low, high = torch.aminmax(ref)  # no temporary as large as the tensor: it may be an embedding
    amax = max(-low.item(), high.item())
    if not math.isfinite(amax):  # inf or NaN among the weights: scale by the finite ones
        finite = ref[torch.isfinite(ref)]
        amax = finite.abs().max().item() if finite.numel() else 0.0
    scale = amax / torch.finfo(dtype).max if amax > 0 else 1.0
    for i in range(0, flat.numel(), _ROUND_ELEMENTS):
        into[i : i + _ROUND_ELEMENTS].copy_(flat[i : i + _ROUND_ELEMENTS].div(scale).to(dtype)).mul_(scale)
    return out


_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
_OWN_MAPPING_BYTES = 4 << 20  # buffers this large or larger get a mapping of their own


def buffers_unmapped_when_freed() -> None:
    """glibc only (elsewhere nothing happens): every buffer of 4 MiB or more gets its own mapping, given
    back to the system when freed. By default glibc raises that threshold up to 32 MiB as large buffers
    are freed, so a block's weights and their rounded copies land in the heap, whose extent a small live
    allocation above them pins: a 3 GB model then kept ~1.6 GiB of writable address space (what
    RLIMIT_DATA and strict overcommit count) for ~1 GiB of memory in use. Process-wide, and set once."""
    import ctypes

    with suppress(OSError, AttributeError):  # no C library to load, or one without mallopt (macOS)
        ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, _OWN_MAPPING_BYTES)


@contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Modules built inside get their parameters on the meta device (no memory) and keep real buffers
    (rotary tables, masks): the model's shape, without its weights. Tied parameters stay tied."""
    import torch

    original = torch.nn.Module.register_parameter

    def register(module: torch.nn.Module, name: str, param: Any) -> None:
        original(module, name, param)
        if param is not None and param.device.type != "meta":
            module._parameters[name] = torch.nn.Parameter(param.to("meta"), requires_grad=False)

    torch.nn.Module.register_parameter = register  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = original  # type: ignore[method-assign]


def _names(names: list[str]) -> str:
    more = f" and {len(names) - MAX_NAMED:,} more" if len(names) > MAX_NAMED else ""
    return ", ".join(repr(n) for n in names[:MAX_NAMED]) + more


class WeightSource:
    """Each parameter of the module -> the checkpoint tensor that holds it, read on demand as float32.

    Names are matched as stored, or with one of `prefixes` added or removed (`model.`, `module.`, a
    Hugging Face base-model prefix); tied parameters (one object, several names) need one of their
    names in the file. Raises ValueError (one line) when a parameter has no tensor or the wrong shape,
    or a tensor of `must_use` is no parameter's.
    """

    def __init__(
        self, ckpt: Checkpoint, module: Any, prefixes: tuple[str, ...] = (), must_use: tuple[str, ...] = ()
    ) -> None:
        self.ckpt = ckpt
        stored = {t.name: t for t in ckpt.tensors}
        groups: dict[int, list[tuple[str, Any]]] = {}
        for name, param in module.named_parameters(remove_duplicate=False):
            groups.setdefault(id(param), []).append((name, param))
        self.tensor_of: dict[str, TensorInfo] = {}
        missing, wrong = [], []
        for group in groups.values():
            found = next((t for name, _ in group for t in self._candidates(stored, name, prefixes)), None)
            name, param = group[0]
            if found is None:
                missing.append(name)
                continue
            if tuple(found.shape) != tuple(param.shape):
                wrong.append(f"{name} is {list(found.shape)} in the file, the model wants {list(param.shape)}")
                continue
            if dtype_info(found.dtype).kind != "float":
                wrong.append(f"{name} is stored as {found.dtype}, not a float")
                continue
            for name, _ in group:
                self.tensor_of[name] = found
        if missing:
            raise ValueError(f"the file has no weights for {len(missing):,} parameter(s): {_names(missing)}")
        if wrong:
            raise ValueError(wrong[0] + (f" (and {len(wrong) - 1:,} more)" if len(wrong) > 1 else ""))
        self.used = {t.name for name in self.tensor_of for t in self._candidates(stored, name, prefixes)}
        extra = [name for name in must_use if name not in self.used]
        if extra:
            raise ValueError(f"the file has {len(extra):,} weight(s) the model does not have: {_names(extra)}")
        self._blobs = Blobs()
        self._cache: dict[str, Any] = {}
        self.bytes_read = 0  # bytes of stored weights read
        self.held = 0  # bytes of float32 reference weights held now, and at most
        self.peak_held = 0

    @staticmethod
    def _candidates(stored: dict[str, TensorInfo], name: str, prefixes: tuple[str, ...]) -> Iterator[TensorInfo]:
        for candidate in (name, *(p + name for p in prefixes), *(name.removeprefix(p) for p in prefixes)):
            if candidate in stored:
                yield stored[candidate]

    def reference(self, name: str) -> Any:
        """The float32 values of the parameter called `name`, read once per block."""
        import numpy as np
        import torch

        t = self.tensor_of[name]
        if t.name not in self._cache:
            storage = self.ckpt.storages.get(t.storage_key)
            if storage is None:
                raise UnreadableStorage(f"storage {t.storage_key} of {t.name} is missing")
            out = np.empty(t.numel, dtype=np.float32)
            pos = 0
            convert = lambda raw: decode(raw, t.dtype, np.float32)  # noqa: E731
            for block in raw_blocks(self._blobs, storage, t, _READ_ELEMENTS, logical=True, convert=convert):
                out[pos : pos + block.size] = block
                pos += block.size
            self._cache[t.name] = torch.from_numpy(out).reshape(t.shape)
            self.bytes_read += t.nbytes
            self.held += out.nbytes
            self.peak_held = max(self.peak_held, self.held)
        return self._cache[t.name]

    def drop_block(self) -> None:
        self._cache.clear()
        self.held = 0

    def close(self) -> None:
        self._cache.clear()
        self._blobs.close()


class _Loader:
    """Forward hooks that give each module its weights, rounded to `fmt`, only while it runs."""

    def __init__(self, module: Any, source: WeightSource) -> None:
        import torch

        self.source, self.fmt = source, REFERENCE_FORMAT
        self.handles = []
        self._meta: dict[int, dict[str, Any]] = {}
        for prefix, sub in module.named_modules(remove_duplicate=False):
            own = dict(sub.named_parameters(recurse=False))
            if not own or id(sub) in self._meta:
                continue
            self._meta[id(sub)] = own
            full = {n: f"{prefix}.{n}" if prefix else n for n in own}
            self.handles.append(sub.register_forward_pre_hook(self._loading(full, torch)))
            self.handles.append(sub.register_forward_hook(self._unloading(own)))

    def _loading(self, full: dict[str, str], torch: Any) -> Any:
        def pre(sub: Any, args: Any) -> None:
            for local, name in full.items():
                rounded = round_weight(self.source.reference(name), self.fmt)
                sub._parameters[local] = torch.nn.Parameter(rounded, requires_grad=False)

        return pre

    def _unloading(self, own: dict[str, Any]) -> Any:
        def post(sub: Any, args: Any, output: Any) -> None:
            sub._parameters.update(own)  # back to meta: the rounded copy is freed

        return post

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()


class _Reached(Exception):
    """Raised by the last recorder: the forward has given every layer its arguments."""


def _recorder(torch: Any, calls: list[tuple[tuple[Any, ...], dict[str, Any]]], last: bool) -> Any:
    class Recorder(torch.nn.Module):
        def forward(self, *args: Any, **kwargs: Any) -> Any:
            calls.append((args, kwargs))
            if last:
                raise _Reached
            return args[0] if args else kwargs.get("hidden_states")

    return Recorder()


def _replayer(torch: Any, output: Any | None) -> Any:
    class Replay(torch.nn.Module):
        def forward(self, *args: Any, **kwargs: Any) -> Any:
            if output is not None:
                return output
            return args[0] if args else kwargs.get("hidden_states")

    return Replay()


@contextmanager
def _layers_swapped(layers: Any, stand_ins: list[Any]) -> Iterator[None]:
    real = list(layers)
    for i, stand_in in enumerate(stand_ins):
        layers[i] = stand_in
    try:
        yield
    finally:
        for i, layer in enumerate(real):
            layers[i] = layer


def _hidden(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """(hidden states, the other positional arguments, the keyword arguments) of one recorded layer call."""
    if args:
        return args[0], args[1:], kwargs
    rest = dict(kwargs)
    return rest.pop("hidden_states"), (), rest


Measure = Callable[[str, Any, Any], Any]  # (input name, reference logits, a rounding's logits) -> its figures


class BlockRun:
    """What one run measured: each input's logits per format (with a `measure`, only the reference's,
    and the figures of the others), and how it ran."""

    def __init__(self, measure: Measure | None = None) -> None:
        self.logits: dict[str, dict[str, Any]] = {}  # input name -> format -> logits
        self.measured: dict[str, dict[str, Any]] = {}  # input name -> format -> what `measure` gave
        self._measure = measure
        self.blocks = 0
        self.bytes_read = 0
        self.mode = ""
        self.used: set[str] = set()  # the checkpoint tensors the model's parameters came from
        self.peak_held = 0  # bytes of float32 reference weights held at once, at most

    def keep(self, name: str, fmt: str, logits: Any) -> None:
        """A format's logits of one input, as they come (the reference first): measured against the
        reference at once and dropped, so a vocabulary-wide tensor per format never piles up."""
        if self._measure is None or fmt == REFERENCE_FORMAT:
            self.logits.setdefault(name, {})[fmt] = logits
        else:
            self.measured.setdefault(name, {})[fmt] = self._measure(name, self.logits[name][REFERENCE_FORMAT], logits)


def run_formats(
    ckpt: Checkpoint,
    model: LogitModel,
    inputs: dict[str, Any],
    formats: tuple[str, ...],
    whole: bool = False,
    must_use: tuple[str, ...] = (),
    measure: Measure | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> BlockRun:
    """Logits of every input under the reference weights and each rounding, block by block (or with the
    whole model as one block). With `measure`, each rounding's logits are measured against the
    reference's as soon as they exist (BlockRun.measured) instead of kept. `progress(done, total)`: after
    each block has run in every format (the whole model: after each format), on this thread."""
    import torch

    buffers_unmapped_when_freed()
    with parameters_on_meta():
        module = model.skeleton()
    module.eval()
    source = WeightSource(ckpt, module, model.prefixes, must_use)
    loader = _Loader(module, source)
    fmts = (REFERENCE_FORMAT, *formats)
    layers = None if whole else model.layers(module)
    run = BlockRun(measure)
    run.used = source.used
    try:
        with torch.no_grad():
            if layers is None or len(layers) == 0:
                run.mode, run.blocks = "whole model", 1
                for done, fmt in enumerate(fmts, 1):
                    loader.fmt = fmt
                    for name, tokens in inputs.items():
                        run.keep(name, fmt, model.logits(module, tokens, True).float())
                    if progress:
                        progress(done, len(fmts))
            else:
                run.mode, run.blocks = "block by block", len(layers) + 2
                _by_blocks(model, module, layers, loader, source, inputs, fmts, run, progress or _no_progress)
        run.bytes_read, run.peak_held = source.bytes_read, source.peak_held
    finally:
        loader.close()
        source.close()
    return run


def _by_blocks(
    model: LogitModel,
    module: Any,
    layers: Any,
    loader: _Loader,
    source: WeightSource,
    inputs: dict[str, Any],
    fmts: tuple[str, ...],
    run: BlockRun,
    progress: Callable[[int, int], None],
) -> None:
    import torch

    n = len(layers)
    progress(0, n + 2)
    calls: dict[tuple[str, str], list[tuple[tuple[Any, ...], dict[str, Any]]]] = {}
    for fmt in fmts:  # block 1: everything before the first layer, up to each layer's arguments
        loader.fmt = fmt
        for name, tokens in inputs.items():
            recorded: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
            recorders = [_recorder(torch, recorded, i == n - 1) for i in range(n)]
            with _layers_swapped(layers, recorders), suppress(_Reached):
                model.logits(module, tokens, True)
            if len(recorded) != n:
                raise RuntimeError(f"the model's forward called {len(recorded)} of its {n} layers")
            calls[fmt, name] = recorded
    source.drop_block()
    progress(1, n + 2)

    hidden = {key: _hidden(*recorded[0])[0] for key, recorded in calls.items()}
    last: dict[tuple[str, str], Any] = {}
    for i, layer in enumerate(layers):  # one block per layer: every format through it, then the next
        for fmt in fmts:
            loader.fmt = fmt
            for name in inputs:
                _, args, kwargs = _hidden(*calls[fmt, name][i])
                out = layer(hidden[fmt, name], *args, **kwargs)
                hidden[fmt, name] = out[0] if isinstance(out, tuple) else out
                if i == n - 1:
                    last[fmt, name] = out
        source.drop_block()
        progress(i + 2, n + 2)
    calls.clear()

    for fmt in fmts:  # the last block: final norm and head, on each format's last layer output
        loader.fmt = fmt
        for name, tokens in inputs.items():
            stand_ins = [_replayer(torch, last.pop((fmt, name)) if i == n - 1 else None) for i in range(n)]
            with _layers_swapped(layers, stand_ins):
                run.keep(name, fmt, model.logits(module, tokens, False).float())
    source.drop_block()
    progress(n + 2, n + 2)


def _no_progress(done: int, total: int) -> None:
    """run_formats without a progress callback."""


# ---------------------------------------------------------------- inputs and measures


def compare_logits(reference: Any, got: Any) -> dict[str, Any]:
    """max and mean |Δlogit|, the share of positions whose argmax agrees, how many were compared, and the
    KL divergence KL(reference || got) of the next-token distributions (nats; mean and max over positions)."""
    import torch

    delta = (reference - got).abs()
    agree = (reference.argmax(-1) == got.argmax(-1)).float()
    vocab = reference.shape[-1]
    ref_rows, got_rows = reference.reshape(-1, vocab), got.reshape(-1, vocab)
    rows = max(1, _KL_CHUNK // max(1, vocab))  # float64 copies of a few rows at a time, not of every logit
    kl = torch.cat(
        [_kl_rows(ref_rows[i : i + rows], got_rows[i : i + rows]) for i in range(0, ref_rows.shape[0], rows)]
    )
    return {
        "max_abs": delta.max().item(),
        "mean_abs": delta.mean().item(),
        "top1_agreement": agree.mean().item(),
        "positions": agree.numel(),
        "kl_mean": kl.mean().item(),
        "kl_max": kl.max().item(),
    }


_KL_CHUNK = 1 << 20  # logits widened to float64 at once for the KL divergence


def _kl_rows(reference: Any, got: Any) -> Any:
    import torch

    log_p = torch.log_softmax(reference.double(), -1)
    log_q = torch.log_softmax(got.double(), -1)
    return (log_p.exp() * (log_p - log_q)).sum(-1)


def perplexity(logits: Any, tokens: Any) -> float:
    """exp(mean negative log-likelihood of each next token), over every window."""
    import torch

    vocab = logits.shape[-1]
    nll = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, vocab).double(), tokens[:, 1:].reshape(-1))
    return math.exp(nll.item()) if math.isfinite(nll.item()) else math.inf
