"""A hostile corpus: files and folders made to get past a scanner, each with a marker-file payload.

`build(root)` writes every case under `root/cases/<name>/` and returns their descriptions; the payload
of a case is `os.system("touch <root>/MARKER_<name>")`, so a case that ever ran leaves its marker.
`root/victim.txt` lies outside every case folder: nothing may change its bytes.

Run by hand: `python -m tests.hostile.corpus DIR` writes the corpus to DIR and prints a summary;
with `--verify-torch` it also loads each file with torch.load(weights_only=False) in a throw-away
process to show which cases are live (their marker appears), i.e. which a false "clean" would let run.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import struct
import sys
import tarfile
import zipfile
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

VICTIM = "victim.txt"
VICTIM_BYTES = b"this file lies outside every case folder\n"


@dataclass
class Case:
    name: str
    family: str
    target: str  # path relative to the case folder ("" = the folder itself)
    code: str  # the finding --report must raise
    exit: int = 1  # --report's exit status
    note: str = ""
    extra: dict = field(default_factory=dict)


class _Call:
    def __init__(self, func, args) -> None:
        self.func, self.args = func, args

    def __reduce__(self):
        return (self.func, self.args)


def _cmd(root: Path, name: str) -> str:
    return f"touch {root / ('MARKER_' + name)}"


def payload(root: Path, name: str, protocol: int = 2) -> bytes:
    return pickle.dumps(_Call(os.system, (_cmd(root, name),)), protocol=protocol)


def _p0(module: str, func: str, arg: str) -> bytes:
    return f"c{module}\n{func}\n(S{arg!r}\ntR.".encode()


def _su(text: str) -> bytes:  # SHORT_BINUNICODE
    raw = text.encode()
    return b"\x8c" + bytes([len(raw)]) + raw


def _arm(data: bytes, cmd: str) -> bytes:
    """A hand-written stream with its argument ("x", or "touch MARKER") made the marker command, in
    whichever string opcode carries it, so that running the stream leaves the case's marker."""
    c = cmd.encode()
    return (
        data.replace(b"touch MARKER", c)
        .replace(b"X\x01\x00\x00\x00x", b"X" + struct.pack("<I", len(c)) + c)
        .replace(_su("x"), _su(cmd))
        .replace(b"U\x01x", b"U" + bytes([len(c)]) + c)
        .replace(b"Vx\n", b"V" + c + b"\n")
        .replace(b"S'x'\n", b"S'" + c + b"'\n")
    )


def _torch_zip_members(obj) -> list[tuple[str, bytes]]:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as z:
        return [(i.filename, z.read(i)) for i in z.infolist()]


def _write_zip(path: Path, members: list[tuple[str, bytes]], method: int = zipfile.ZIP_STORED) -> None:
    with zipfile.ZipFile(path, "w", compression=method) as z:
        for name, data in members:
            z.writestr(zipfile.ZipInfo(name), data, compress_type=method)


def _benign_zip_members() -> list[tuple[str, bytes]]:
    import torch

    return _torch_zip_members({"w": torch.ones(4), "step": 1})


def _swap_pkl(members, data: bytes) -> list[tuple[str, bytes]]:
    return [(n, data if n.endswith("/data.pkl") else d) for n, d in members]


def _hostile_data_pkl(root: Path, name: str) -> bytes:
    import torch

    members = _torch_zip_members({"w": torch.ones(4), "x": _Call(os.system, (_cmd(root, name),))})
    return next(d for n, d in members if n.endswith("/data.pkl"))


def build(root: Path) -> list[Case]:  # noqa: C901 - one long list of cases, read top to bottom
    import torch
    from safetensors.torch import save_file

    root = Path(root)
    cases_dir = root / "cases"
    cases_dir.mkdir(parents=True, exist_ok=True)
    (root / VICTIM).write_bytes(VICTIM_BYTES)
    cases: list[Case] = []

    def folder(name: str) -> Path:
        d = cases_dir / name
        d.mkdir(parents=True, exist_ok=True)
        return d

    def add(case: Case) -> None:
        cases.append(case)

    # ---- family: pickle — classic code-running pickles in every protocol and opcode form
    for proto in range(6):
        n = f"pickle_proto{proto}"
        (folder(n) / "p.pkl").write_bytes(payload(root, n, proto))
        add(Case(n, "pickle", "p.pkl", "UNSAFE_PICKLE"))
    forms = {
        "pickle_global_exec": _p0("builtins", "exec", "import os; os.system('touch MARKER')"),
        "pickle_global_eval": _p0("__builtin__", "eval", "__import__('os').system('touch MARKER')"),
        "pickle_subprocess": _p0("subprocess", "getoutput", "touch MARKER"),
        "pickle_runpy": _p0("runpy", "run_path", "/nonexistent"),
        "pickle_inst": b"(S'touch MARKER'\nios\nsystem\n.",
        "pickle_obj": b"\x80\x02(cos\nsystem\nX\x01\x00\x00\x00xo.",
        "pickle_stack_global": b"\x80\x04" + _su("os") + _su("system") + b"\x93" + _su("x") + b"\x85R.",
        "pickle_getattr_chain": b"\x80\x02cbuiltins\ngetattr\ncos\nsystem\nX\x01\x00\x00\x00x\x86R.",
        "pickle_importlib": _p0("importlib", "import_module", "os"),
        "pickle_unknown_module": _p0("totally_unknown_mod", "run", "x"),
    }
    for n, data in forms.items():
        (folder(n) / "p.pkl").write_bytes(_arm(data, _cmd(root, n)))
        add(Case(n, "pickle", "p.pkl", "UNSAFE_PICKLE"))

    # ---- family: semantics — streams where a scanner that is not CPython's unpickler sees something else
    sem = {
        # MARK POP pops the mark: STACK_GLOBAL takes posix/system (a naive stack sees OrderedDict)
        "sem_pop_after_mark": b"\x80\x04"
        + _su("posix")
        + _su("system")
        + _su("collections")
        + _su("OrderedDict")
        + b"00(0\x93"
        + _su("x")
        + b"\x85R.",  # fmt: skip
        "sem_pop_mark": b"\x80\x04"
        + _su("os")
        + _su("system")
        + b"("
        + _su("collections")
        + _su("OrderedDict")
        + b"1\x93"
        + _su("x")
        + b"\x85R.",  # fmt: skip
        # MEMOIZE writes slot len(memo): after MEMOIZE (slot 0) and PUT 5, it fills slot 2, not 6
        "sem_memoize_len": b"\x80\x04"
        + _su("os")
        + b"\x94"
        + _su("builtins")
        + b"q\x05"
        + _su("system")
        + b"\x94"
        + b"0" * 3
        + b"h\x00h\x02\x93"
        + _su("x")
        + b"\x85R.",  # fmt: skip
        "sem_dup": b"\x80\x04" + _su("os") + _su("system") + b"2" + b"0" + b"\x93" + _su("x") + b"\x85R.",
        "sem_binstring_names": b"\x80\x02U\x02osU\x06system\x93U\x01x\x85R.",
        "sem_unicode_names": b"V os\nVsystem\n\x93Vx\n\x85R.".replace(b"V os", b"Vos"),
        "sem_string_names": b"S'os'\nS'system'\n\x93S'x'\n\x85R.",
        "sem_cut_after_reduce": b"\x80\x04" + _su("os") + _su("system") + b"\x93" + _su("x") + b"\x85R",  # no STOP
        "sem_second_pickle": pickle.dumps({"a": 1}, protocol=2) + b"\x80\x02cos\nsystem\nX\x01\x00\x00\x00x\x85R.",
        "sem_frame": b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00"
        + _su("os")
        + _su("system")
        + b"\x93"
        + _su("x")
        + b"\x85R.",  # fmt: skip
        "sem_proto1_header": b"\x80\x01cposix\nsystem\nq\x00(X\x01\x00\x00\x00xq\x01tq\x02Rq\x03.",
        "sem_ext_unregistered": b"\x80\x02\x82\xf0X\x01\x00\x00\x00x\x85R.",
    }
    for n, data in sem.items():
        (folder(n) / "p.pkl").write_bytes(_arm(data, _cmd(root, n)))
        add(Case(n, "semantics", "p.pkl", "UNSAFE_PICKLE"))
    big = b"(" + b"N" * (2 << 20) + b"0" * (2 << 20) + b"1" + _p0("os", "system", _cmd(root, "sem_padded_proto0"))
    (folder("sem_padded_proto0") / "weights.dat").write_bytes(big)
    add(Case("sem_padded_proto0", "semantics", "weights.dat", "UNSAFE_PICKLE", note="protocol 0, > 1 MiB, odd suffix"))

    # ---- family: container — where the pickle hides inside an archive or an old format
    benign = _benign_zip_members()
    n = "zip_data_pkl"
    _write_zip(folder(n) / "m.pt", _swap_pkl(benign, _hostile_data_pkl(root, n)))
    add(Case(n, "container", "m.pt", "UNSAFE_PICKLE"))
    n = "zip_deflated_data_pkl"
    _write_zip(folder(n) / "m.pt", _swap_pkl(benign, _hostile_data_pkl(root, n)), zipfile.ZIP_DEFLATED)
    add(Case(n, "container", "m.pt", "UNSAFE_PICKLE"))
    n = "zip_constants_pkl"
    _write_zip(folder(n) / "m.pt", benign + [(benign[0][0].split("/")[0] + "/constants.pkl", payload(root, n))])
    add(Case(n, "container", "m.pt", "UNSAFE_PICKLE"))
    n = "zip_uppercase_pkl"
    _write_zip(folder(n) / "m.pt", benign + [(benign[0][0].split("/")[0] + "/extra/STATE.PKL", payload(root, n))])
    add(Case(n, "container", "m.pt", "UNSAFE_PICKLE"))
    n = "zip_duplicate_data_pkl_second"
    archive = benign[0][0].split("/")[0]
    with zipfile.ZipFile(folder(n) / "m.pt", "w") as z:
        for name_, data in benign:
            z.writestr(name_, data)
        with_warning = zipfile.ZipInfo(f"{archive}/data.pkl")
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            z.writestr(with_warning, _hostile_data_pkl(root, n))
    add(Case(n, "container", "m.pt", "UNSAFE_PICKLE"))
    n = "zip_case_insensitive_data_pkl"
    _write_zip(folder(n) / "m.pt", [(f"{archive}/DATA.PKL" if x.endswith("/data.pkl") else x, d)
                                    for x, d in _swap_pkl(benign, _hostile_data_pkl(root, n))])  # fmt: skip
    add(Case(n, "container", "m.pt", "UNSAFE_PICKLE"))
    n = "zip_local_name_differs"
    hostile = _hostile_data_pkl(root, n)
    _write_zip(folder(n) / "m.pt", _swap_pkl(benign, hostile))
    blob = bytearray((folder(n) / "m.pt").read_bytes())
    at = blob.index(f"{archive}/data.pkl".encode())  # the first occurrence is the local header's name
    blob[at : at + len(archive)] = b"x" * len(archive)  # the local header now names another file
    (folder(n) / "m.pt").write_bytes(bytes(blob))
    add(Case(n, "container", "m.pt", "UNSAFE_PICKLE", note="central directory and local header disagree on the name"))
    n = "zip64_second_directory"
    _write_zip(folder(n) / "m.pt", _swap_pkl(benign, _hostile_data_pkl(root, n)))
    _add_zip64_decoy(folder(n) / "m.pt", benign)
    add(Case(n, "container", "m.pt", "UNSAFE_PICKLE", note="a zip64 locator points at a second, benign directory"))
    n = "zip64_hostile_directory"
    _write_zip(folder(n) / "m.pt", benign)
    _add_zip64_decoy(folder(n) / "m.pt", _swap_pkl(benign, _hostile_data_pkl(root, n)))
    add(Case(n, "container", "m.pt", "UNSAFE_PICKLE", note="the end record names a benign directory, the zip64 "
             "record (which torch follows) a hostile one"))  # fmt: skip
    n = "zip_big_other_pickle"
    big_pickle = b"\x80\x02" + b"N0" * (33 << 20) + payload(root, n)[2:]
    with zipfile.ZipFile(folder(n) / "m.pt", "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for name_, data in benign + [(f"{archive}/big.pkl", big_pickle)]:
            z.writestr(name_, data)
    add(Case(n, "container", "m.pt", "UNSAFE_PICKLE", note="a 66 MiB pickle inside the archive, scanned whole"))
    n = "legacy_stacked"
    (folder(n) / "old.pt").write_bytes(pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2) + payload(root, n))
    add(Case(n, "container", "old.pt", "UNSAFE_PICKLE"))
    for member in ("pickle", "storages", "tensors"):
        n = f"legacy_tar_{member}"
        with tarfile.open(folder(n) / "old.pt", "w", format=tarfile.PAX_FORMAT) as tar:
            for m in ("storages", "tensors", "pickle"):
                # what torch's tar loader reads: storages holds a count and the views, the others a count
                filler = pickle.dumps(0, protocol=2) + (pickle.dumps([], protocol=2) if m == "storages" else b"")
                data = payload(root, n) if m == member else filler
                info = tarfile.TarInfo(m)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        add(Case(n, "container", "old.pt", "UNSAFE_PICKLE"))
    n = "plain_pickle_300mib"
    target = folder(n) / "huge.pkl"
    with open(target, "wb") as f:
        f.write(b"\x80\x04\x8e" + struct.pack("<Q", 300 << 20))
        f.seek(300 << 20, os.SEEK_CUR)  # a sparse hole: 300 MiB of zeros the file system never stores
        f.write(b"0" + payload(root, n, 4)[2:])
    add(Case(n, "container", "huge.pkl", "UNSAFE_PICKLE", note="beyond the old 256 MiB limit"))

    # ---- family: folder — where discovery must look
    n = "folder_hidden_file"
    (folder(n) / ".cache.pt").write_bytes(payload(root, n))
    add(Case(n, "folder", "", "UNSAFE_PICKLE"))
    n = "folder_odd_suffix"
    (folder(n) / "weights.dat").write_bytes(payload(root, n))
    add(Case(n, "folder", "", "UNSAFE_PICKLE"))
    n = "folder_no_suffix"
    (folder(n) / "latest").write_bytes(_p0("os", "system", _cmd(root, n)))
    add(Case(n, "folder", "", "UNSAFE_PICKLE"))
    n = "folder_tmp_beside_main"
    d = folder(n)
    torch.save({"w": torch.ones(2), "step": 1}, d / "ckpt.pt")
    torch.save({"w": torch.ones(2), "step": 2, "x": _Call(os.system, (_cmd(root, n),))}, d / "ckpt.pt.tmp")
    add(Case(n, "folder", "", "UNSAFE_PICKLE"))
    n = "folder_tmp_alone"
    (folder(n) / "evil.tmp").write_bytes(_p0("os", "system", _cmd(root, n)))
    add(Case(n, "folder", "", "UNSAFE_PICKLE"))
    n = "folder_sharded_bin"
    d = folder(n)
    (d / "pytorch_model-00001-of-00001.bin").write_bytes(payload(root, n))
    (d / "pytorch_model.bin.index.json").write_text(
        json.dumps({"weight_map": {"a": "pytorch_model-00001-of-00001.bin"}})
    )
    add(Case(n, "folder", "", "UNSAFE_PICKLE"))
    n = "folder_shard_escape"
    d = folder(n)
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "../../" + VICTIM}}))
    add(Case(n, "folder", "model.safetensors.index.json", "CORRUPT"))
    n = "folder_shard_symlink"
    d = folder(n)
    (d / "model-00001-of-00001.safetensors").symlink_to(root / VICTIM)
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model-00001-of-00001.safetensors"}})
    )
    add(Case(n, "folder", "model.safetensors.index.json", "CORRUPT"))
    n = "dcp_metadata"
    d = folder(n)
    (d / ".metadata").write_bytes(payload(root, n, 4))
    (d / "__0_0.distcp").write_bytes(b"")
    add(Case(n, "folder", "", "UNSAFE_PICKLE"))
    n = "dcp_rank_metadata_fallback"
    d = folder(n)
    (d / "__0.metadata").write_bytes(payload(root, n, 4))
    (d / "__0_0.distcp").write_bytes(b"")
    add(Case(n, "folder", "", "UNSAFE_PICKLE", note="no .metadata: dcp.load reads __0.metadata"))
    n = "dcp_broken_metadata_fallback"
    d = folder(n)
    (d / ".metadata").write_bytes(b"garbage")
    (d / "__1.metadata").write_bytes(payload(root, n, 4))
    add(Case(n, "folder", "", "UNSAFE_PICKLE"))

    # ---- family: containment — repair's manifest, quarantine and tmp
    run_id = "20990101T000000_000000Z"

    def manifest(d: Path, moves) -> None:
        q = d / ".ckinspect-quarantine" / run_id
        q.mkdir(parents=True)
        (q / "manifest.json").write_text(json.dumps({"schema": 1, "status": "applied",
                                                     "entries": [{"action": "promote", "moves": moves}]}))  # fmt: skip

    escapes = {
        "contain_dotdot": "../../" + VICTIM,
        "contain_absolute": str(root / VICTIM),
        "contain_inner_dotdot": "a/../../../" + VICTIM,
    }
    for n, escape in escapes.items():
        d = folder(n)
        torch.save({"w": torch.ones(2)}, d / "a.pt")
        manifest(d, [{"op": "rename", "from": escape, "to": "a.pt", "size": None, "mtime_ns": None}])
        add(Case(n, "containment", "a.pt", "", exit=0, extra={"undo_exit": 2}))
    n = "contain_symlink_in_path"
    d = folder(n)
    torch.save({"w": torch.ones(2)}, d / "a.pt")
    (d / "up").symlink_to(root)
    manifest(d, [{"op": "replace", "from": "up/" + VICTIM, "to": "a.pt", "size": None, "mtime_ns": None}])
    add(Case(n, "containment", "a.pt", "", exit=0, extra={"undo_exit": 2}))
    n = "contain_quarantine_symlink"
    d = folder(n)
    torch.save({"w": torch.ones(2), "step": 1}, d / "r.pt")
    (d / "r.pt.tmp").write_bytes((d / "r.pt").read_bytes()[:100])
    (d / ".ckinspect-quarantine").symlink_to(root)
    add(Case(n, "containment", "r.pt", "LEFTOVER_TMP", exit=0, extra={"apply_exit": 2}))
    bad_moves = ('{"status": "applied", "entries": [{"moves": [{"op": "rm"}]}]}',
                 '{"status": "applied", "entries": [{"moves": [{"op": "rename", "from": 1, "to": 2}]}]}')  # fmt: skip
    for i, doc in enumerate([b"{", b"[]", *(m.encode() for m in bad_moves)]):
        n = f"contain_malformed_manifest_{i}"
        d = folder(n)
        torch.save({"w": torch.ones(2)}, d / "a.pt")
        q = d / ".ckinspect-quarantine" / run_id
        q.mkdir(parents=True)
        (q / "manifest.json").write_bytes(doc)
        add(Case(n, "containment", "a.pt", "", exit=0, extra={"undo_exit": 2}))
    n = "contain_unsafe_tmp_promote"
    d = folder(n)
    torch.save({"w": torch.ones(2), "step": 1}, d / "r.pt")
    (d / "r.pt").write_bytes((d / "r.pt").read_bytes()[:200])  # the main is cut: a whole tmp would be promoted
    torch.save({"w": torch.ones(2), "step": 2, "x": _Call(os.system, (_cmd(root, n),))}, d / "r.pt.tmp")
    add(Case(n, "containment", "", "UNSAFE_PICKLE", extra={"apply_exit": 1, "tmp_kept": "r.pt.tmp"}))

    # ---- family: bounds — small files that cost memory or time
    a: list = ["x" * 10]
    for _ in range(40):
        a = [a, a]
    n = "bounds_laughs_list"
    torch.save({"w": torch.ones(2), "config": a, "args": {"x": a}}, folder(n) / "l.pt")
    add(Case(n, "bounds", "l.pt", "", exit=0))
    dct: dict = {}
    for _ in range(40):
        dct = {"a": dct, "b": dct}
    n = "bounds_laughs_dict"
    torch.save({"w": torch.ones(2), "model_args": dct}, folder(n) / "l.pt")
    add(Case(n, "bounds", "l.pt", "", exit=0))
    n = "bounds_deep_nesting"
    depth = 1_000_000
    (folder(n) / "deep.pkl").write_bytes(b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b".")
    add(Case(n, "bounds", "deep.pkl", "CORRUPT"))
    n = "bounds_dup_run"
    (folder(n) / "dup.pkl").write_bytes(b"\x80\x02N" + b"2" * (8 << 20) + _p0("os", "system", "x")[:-1] + b".")
    add(Case(n, "bounds", "dup.pkl", "UNSAFE_PICKLE"))
    n = "bounds_memo_index"
    (folder(n) / "m.pkl").write_bytes(b"\x80\x02Nr\xff\xff\xff\x7f0" + payload(root, n)[2:])
    add(Case(n, "bounds", "m.pkl", "UNSAFE_PICKLE"))
    n = "bounds_zip_bomb"
    bomb = zlib.compressobj(1, zlib.DEFLATED, -15)
    raw = bomb.compress(b"\x80\x02" + b"N0" * (64 << 20)) + bomb.flush()
    hostile = _hostile_data_pkl(root, n)
    members = _swap_pkl(benign, hostile)
    _write_zip(folder(n) / "m.pt", members, zipfile.ZIP_DEFLATED)
    _patch_member(folder(n) / "m.pt", f"{archive}/data.pkl", raw, declared=len(hostile))
    add(Case(n, "bounds", "m.pt", "CORRUPT", note="data.pkl inflates to 128 MiB, declares a few hundred bytes"))
    n = "bounds_huge_string_length"
    (folder(n) / "s.pkl").write_bytes(b"\x80\x04\x8d" + struct.pack("<Q", 1 << 62) + b"abc")
    add(Case(n, "bounds", "s.pkl", "CORRUPT"))
    n = "bounds_long_global_line"
    (folder(n) / "g.pkl").write_bytes(b"c" + b"o" * (3 << 20) + b"\nsystem\n)R.")
    add(Case(n, "bounds", "g.pkl", "UNSAFE_PICKLE"))
    n = "bounds_many_globals"
    (folder(n) / "g.pkl").write_bytes(b"\x80\x02" + b"".join(f"cm{i}\nf\n0".encode() for i in range(30000)) + b"N.")
    add(Case(n, "bounds", "g.pkl", "UNSAFE_PICKLE"))
    n = "bounds_dcp_chunks"
    d = folder(n)
    (d / ".metadata").write_bytes(_dcp_many_chunks(2_000_000))
    add(Case(n, "bounds", "", "CORRUPT"))

    # ---- family: output — names that try to drive the terminal or break the Markdown report
    names = {
        "output_osc_title": "w\x1b]0;pwned\x07",
        "output_osc52_clipboard": "w\x1b]52;c;dG91Y2ggL3RtcC94\x07",
        "output_csi_clear": "w\x1b[2J\x1b[1;1H",
        "output_c1_csi": "w\x9b2J",
        "output_bidi": "w\u202egpj.exe",
        "output_md_backticks": "w`</details><img src=x onerror=alert(1)>`",
        "output_md_pipes_links": "w|a|[x](javascript:alert(1))",
    }
    for n, bad in names.items():
        save_file({bad: torch.ones(2), "ok": torch.ones(2)}, folder(n) / "n.safetensors")
        add(Case(n, "output", "n.safetensors", "", exit=0, extra={"bad_name": bad}))
    n = "output_file_name"
    torch.save({"w": torch.ones(2)}, folder(n) / "f\x1b[31mred.pt")
    add(Case(n, "output", "", "", exit=0, extra={"bad_name": "\x1b[31m"}))

    (root / "cases.json").write_text(json.dumps([asdict(c) for c in cases], indent=1))
    return cases


def _patch_member(path: Path, name: str, raw: bytes, declared: int) -> None:
    """Replace a deflated member's data by `raw` and claim `declared` inflated bytes (a zip bomb)."""
    with zipfile.ZipFile(path) as z:
        members = [(i.filename, z.read(i)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w") as z:
        for member, data in members:
            if member == name:
                info = zipfile.ZipInfo(member)
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, b"")  # placeholder, rewritten below
            else:
                z.writestr(zipfile.ZipInfo(member), data)
    blob = path.read_bytes()
    # rebuild by hand: the placeholder's local header and central entry get the bomb's sizes
    at = blob.index(b"PK\x03\x04" + blob[4:4])  # first local header
    del at
    out = bytearray()
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
    central = []
    for info in infos:
        if info.filename == name:
            data, method, size, crc = raw, 8, declared, 0
        else:
            start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
            data = blob[start : start + info.compress_size]
            method, size, crc = info.compress_type, info.file_size, info.CRC
        offset = len(out)
        fname = info.filename.encode()
        out += struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, method, 0, 0, crc, len(data), size, len(fname), 0)
        out += fname + data
        central.append(struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, method, 0, 0, crc, len(data), size,
                                   len(fname), 0, 0, 0, 0, 0, offset) + fname)  # fmt: skip
    cd_start = len(out)
    for entry in central:
        out += entry
    out += struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(central), len(central), len(out) - cd_start, cd_start, 0)
    path.write_bytes(bytes(out))


def _add_zip64_decoy(path: Path, benign: list[tuple[str, bytes]]) -> None:
    """Append a copy of the archive with these members and a zip64 end record (with its locator) that
    points at their directory, in front of the original end record, which still points at the first one."""
    blob = path.read_bytes()
    eocd = blob.rindex(b"PK\x05\x06")
    head, tail = blob[:eocd], blob[eocd:]
    out = bytearray(head)
    central = []
    for member, data in benign:
        offset = len(out)
        fname = member.encode()
        crc = zlib.crc32(data)
        out += struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 0, 0, 0, crc, len(data), len(data), len(fname), 0)
        out += fname + data
        central.append(struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 45, 20, 0, 0, 0, 0, crc, len(data), len(data),
                                   len(fname), 0, 0, 0, 0, 0, offset) + fname)  # fmt: skip
    cd = len(out)
    for entry in central:
        out += entry
    cd_size = len(out) - cd
    z64 = len(out)
    out += struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, len(central), len(central), cd_size, cd)
    out += struct.pack("<4sLQL", b"PK\x06\x07", 0, z64, 1)
    out += tail
    path.write_bytes(bytes(out))


def _dcp_many_chunks(count: int) -> bytes:
    """A DCP-shaped .metadata whose one tensor declares `count` chunks, all the same memo'd object."""
    meta = "torch.distributed.checkpoint.metadata"
    out = bytearray(b"\x80\x02")
    out += f"c{meta}\nMetadata\n)\x81}}(X\x13\x00\x00\x00state_dict_metadata}}X\x01\x00\x00\x00w".encode("latin-1")
    out += f"c{meta}\nTensorStorageMetadata\n)\x81}}X\x06\x00\x00\x00chunks](".encode("latin-1")
    out += f"c{meta}\nChunkStorageMetadata\n)\x81q\x01".encode("latin-1")
    out += b"h\x01" * (count - 1)
    out += b"esbsX\x0c\x00\x00\x00storage_data}ub."
    return bytes(out)


def verify_torch(root: Path, cases: list[Case]) -> dict[str, bool]:
    """Which cases torch.load(weights_only=False) runs: {name: marker appeared}. torch is imported once;
    each load runs in a forked child of its own (killed after 300 s), so a payload cannot touch the next."""
    import signal

    import torch  # noqa: F401 - imported before the forks, so each child starts loading at once

    live = {}
    for case in cases:
        target = root / "cases" / case.name / case.target
        if not case.target or not target.is_file():
            continue
        pid = os.fork()
        if pid == 0:  # the child: load, whatever happens exit without returning into the caller
            code = 0
            try:
                signal.alarm(300)
                torch.load(target, weights_only=False)
            except BaseException:  # noqa: BLE001 - a refused or broken file is an answer too
                code = 1
            os._exit(code)
        os.waitpid(pid, 0)
        live[case.name] = (root / f"MARKER_{case.name}").exists()
    return live


if __name__ == "__main__":
    out = Path(sys.argv[1])
    built = build(out)
    families: dict[str, int] = {}
    for c in built:
        families[c.family] = families.get(c.family, 0) + 1
    print(json.dumps({"cases": len(built), "families": families}, indent=1))
    if "--verify-torch" in sys.argv:
        print(json.dumps(verify_torch(out, built), indent=1))
