"""The requests an answer costs over a URL, counted by the servers themselves (the HTTP range server; moto's S3 and
the GCS emulator behind a proxy that counts what the client sends), each answer the same as on disk. What a
request costs decides how bytes are fetched (io.remote's cost model): a small object in one GET, the ranges a
listing or a value scan plans in a few large GETs, pieces of many objects side by side, sizes from the listing
where it gives them, and nothing for a save the answer does not judge."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from tests.conftest import run_cli, run_cli_process
from tests.helpers.dcp_saves import sharded_save
from tests.helpers.remote_servers import (
    counting_proxy,
    gcs_kind,
    moto_s3,
    put_objects,
    range_server,
    s3_kind,
    timeless,
)

pytestmark = pytest.mark.remote

KIB = 1 << 10


@pytest.fixture(scope="module")
def root(tmp_path_factory, ckpts) -> Path:
    """What is served: DCP saves over 4 ranks whose rank files are larger and smaller than io.remote.WHOLE, a run of
    two DCP saves, a torch zip of 3,000 tiny tensors (dense) and one of 8 large ones (sparse), a sharded safetensors
    set (an index and two shards), a DeepSpeed run."""
    from tests.analysis.runs.test_runs import ds_tag

    top = tmp_path_factory.mktemp("requests") / "served"
    g = torch.Generator().manual_seed(0)
    large = {f"layers.{i}.weight": torch.randn(512, 128, generator=g) for i in range(4)}  # 64 KiB a rank each
    sharded_save(top / "dcp-large", large, ranks=4)
    sharded_save(top / "dcp-small", {f"w{i}": torch.randn(32, 16, generator=g) for i in range(4)}, ranks=4)
    for step in (2, 4):
        shutil.copytree(ckpts["dcp"], top / "dcp-run" / f"step-{step}")
    shutil.copytree(ckpts["dcp"], top / "dcp-newest" / "step-4")
    torch.save({f"t{i}": torch.randn(4, 4, generator=g) for i in range(3000)}, top / "dense.pt")
    torch.save({f"t{i}": torch.randn(256, 256, generator=g) for i in range(8)}, top / "sparse.pt")
    from tests.io.test_remote_folders import _sharded

    _sharded(top / "sharded")
    ds_tag(top / "ds", 10)
    ds_tag(top / "ds", 20)
    (top / "ds" / "latest").write_text("global_step20")
    return top


def _files(top: Path) -> dict[str, Path]:
    """Every file by its key, uploaded in the order a save writes them: a DCP save's `.metadata` after its data
    (an object's time is its upload's: data newer than `.metadata` would be WRITTEN_AFTER_COMMIT)."""
    paths = sorted((p for p in top.rglob("*") if p.is_file()), key=lambda p: (p.name == ".metadata", p))
    return {p.relative_to(top).as_posix(): p for p in paths}


@pytest.fixture(scope="module")
def s3(root):
    """moto's S3 behind a counting proxy: the env a client needs (its endpoint is the proxy) and the proxy."""
    with moto_s3() as env:
        put_objects(env, "bkt", _files(root))
        with counting_proxy(env["AWS_ENDPOINT_URL"], s3_kind) as proxy:
            yield {**env, "AWS_ENDPOINT_URL": proxy.url}, proxy


@pytest.fixture(scope="module")
def gcs(root):
    pytest.importorskip("gcsfs")
    pytest.importorskip("gcp_storage_emulator")
    from tests.helpers.remote_servers import gcs_emulator, put_gcs_objects

    with gcs_emulator() as env:
        put_gcs_objects(env, "bkt", _files(root))
        with counting_proxy(env["STORAGE_EMULATOR_HOST"], gcs_kind) as proxy:
            yield {**env, "STORAGE_EMULATOR_HOST": proxy.url}, proxy


@pytest.fixture(scope="module")
def http(root):
    with range_server(root) as server:
        yield server


def over_http(http, name: str, *args: str) -> tuple[object, dict[str, int]]:
    http.reset_counts()
    proc = run_cli_process(*args, f"{http.url}/{name}")
    assert proc.returncode in (0, 1), proc.stderr
    return proc, dict(http.kinds)


def over_store(store, scheme: str, name: str, *args: str) -> tuple[object, dict[str, int]]:
    env, proxy = store
    proxy.reset_counts()
    proc = run_cli_process(*args, f"{scheme}://bkt/{name}", env=env)
    assert proc.returncode in (0, 1), proc.stderr
    return proc, proxy.counts()


def local(root: Path, name: str, *args: str):
    return run_cli(*args, root / name if not name.endswith("/") else f"{root / name}/")


def answers(root, http, s3, gcs, name: str, *args: str) -> dict[str, dict[str, int]]:
    """The requests of `ckinspect ARGS URL` over HTTP, S3 and (where `gcs` is given) GCS, each answer the local one's
    (the JSON, times aside; the path otherwise)."""
    theirs = local(root, name, *args).stdout
    got = {}
    for label, prefix, (proc, counts) in (
        ("http", http.url, over_http(http, name, *args)),
        ("s3", "s3://bkt", over_store(s3, "s3", name, *args)),
        *([("gcs", "gs://bkt", over_store(gcs, "gs", name, *args))] if gcs is not None else []),
    ):
        if "json" in args:
            assert timeless(proc.stdout, prefix) == timeless(theirs, str(root)), label
        else:
            assert proc.stdout.replace(prefix, "ROOT") == theirs.replace(str(root), "ROOT"), label
        got[label] = counts
    return got


@pytest.mark.parametrize(
    ("name", "gets"),
    [("dcp-large/", 1 + 4 + 4), ("dcp-small/", 1 + 4)],
    ids=["files larger than WHOLE: two reads each", "small files: one read each"],
)
def test_a_dcp_listing_reads_each_rank_file_once_or_twice_and_sizes_come_from_the_listing(root, http, s3, gcs, name,
                                                                                          gets):  # fmt: skip
    """`--report --quick` of a DCP save: `.metadata`, then each rank file's first item's start and last item's end
    (a local header, an end-of-directory record): two GETs where the file is larger than io.remote.WHOLE, one GET of
    the whole file where it is smaller. An object store's listing gives every size (no HEAD); a web server's index
    page does not: a HEAD per file there."""
    got = answers(root, http, s3, gcs, name, "--report", "--quick", "--format", "json")
    assert got == {
        "http": {"index": 1, "HEAD": 5, "GET range": gets},
        "s3": {"LIST": 1, "GET": gets},
        "gcs": {"LIST": 1, "GET": gets},
    }


def test_each_rank_files_reads_go_out_side_by_side(http):
    """The four rank files' first reads go out together, then their last reads together: a round trip each, not
    eight one after the other (the server holds each answer a moment, so those sent together are seen so)."""
    http.delay = 0.2
    try:
        _, got = over_http(http, "dcp-large/", "--report", "--quick")
        most = http.most_in_flight
    finally:
        http.delay = 0.0
    assert got == {"index": 1, "HEAD": 5, "GET range": 9}
    assert most == 4


@pytest.mark.parametrize("form", [[], ["--format", "json"]], ids=["the path", "json"])
def test_a_save_last_good_does_not_judge_costs_no_request_beyond_the_listing(root, http, s3, gcs, form):
    """last-good of a run of two DCP saves whose newest is good: the older save is listed, never read. Its requests
    are those of a run of the newest save alone, but for the listing of the older one's folder where a listing is a
    page per folder (a web server's index), and for the older save's sizes where the JSON shows them and the
    listing did not give them (a HEAD per file of it there)."""
    both = answers(root, http, s3, gcs, "dcp-run/", "last-good", "--quick", *form)
    newest = answers(root, http, s3, gcs, "dcp-newest/", "last-good", "--quick", *form)
    reads = {"LIST": 1, "GET": 2}  # .metadata, and the one rank file whole (smaller than WHOLE)
    assert newest == {"http": {"index": 2, "HEAD": 2, "GET range": 2}, "s3": reads, "gcs": reads}
    assert both == {"http": {"index": 3, "HEAD": 2 + (2 if form else 0), "GET range": 2}, "s3": reads, "gcs": reads}


@pytest.mark.parametrize(
    ("name", "args", "gets"),
    [
        ("dense.pt", ["--quick"], 5),
        ("dense.pt", [], 5 + 1),
        ("sparse.pt", ["--quick"], 2 + 8),
        ("sparse.pt", [], 2 + 8 + 1),
    ],
    ids=["dense listing", "dense values", "sparse listing", "sparse values"],
)
def test_a_zip_of_tiny_tensors_takes_a_handful_of_requests_and_one_of_large_ones_stays_cheap(root, http, s3, name,
                                                                                             args, gets):  # fmt: skip
    """A torch zip of 3,000 tiny tensors (1 MB): its first block (what the file is), its tail (end records), its
    directory, its pickle, then every storage's local header in one request; the value scan reads every storage in
    one more. One of 8 tensors of 256 KiB: its first block (the pickle in it), its tail (the directory in it), then
    each local header on its own (they lie 256 KiB apart: more than a request costs), side by side; the scan reads
    the storages in one request. A lone URL's size is one HEAD (no listing gives it)."""
    got = answers(root, http, s3, None, name, "--report", "--format", "json", *args)
    assert got == {"http": {"HEAD": 1, "GET range": gets}, "s3": {"HEAD": 1, "GET": gets}}


def test_a_run_of_small_files_reads_each_part_it_judges_once(root, http, s3, gcs):
    """last-good (values read) of a DeepSpeed run of two saves, each three files smaller than WHOLE: `latest` and the
    newest save's three files, each in one GET, their values read from what was fetched; the older save is not
    read. Over a web server's index pages each file read costs one HEAD for its size, asked once: the size learnt
    when the file is opened is the listing's (it was asked again for the JSON, 1 + 3 + 3 HEADs)."""
    got = answers(root, http, s3, gcs, "ds/", "last-good", "--format", "json")
    assert got == {
        "http": {"index": 3, "HEAD": 1 + 3, "GET range": 1 + 3},
        "s3": {"LIST": 1, "GET": 1 + 3},
        "gcs": {"LIST": 1, "GET": 1 + 3},
    }


def test_planned_reads_give_the_bytes_a_local_read_gives(root, http, monkeypatch):
    """Reads under a plan (io.remote.RemoteFile.planned) give exactly what a local read gives: inside a window,
    across the cut between two windows of one run, overlapping planned ranges, partly and wholly outside the plan,
    past the object's end; windows held at most AHEAD bytes; requests as the cost model says."""
    from ckinspect.io import remote
    from ckinspect.io.folders import opened

    monkeypatch.setattr(remote, "WINDOW", 10_000)  # small windows: runs cut in several, fetched two at a time
    monkeypatch.setattr(remote, "AHEAD", 20_000)
    data = (root / "dense.pt").read_bytes()
    size = len(data)
    plan = [(200_000 + 3_000 * i, 500) for i in range(40)]  # one run of 40 ranges (gaps 2,500 < GAP): 12 windows
    plan += [(200_100, 2_000), (700_000, 4), (size - 300_000, 2 << 20)]  # overlapping; alone; longer than PLANNED_MOST
    reads = [(200_000, 500), (209_990, 20), (200_050, 3_000), (230_000, 40_000), (199_990, 20), (700_000, 4),
             (700_002, 10), (500_000, 16), (size - 10, 50), (size + 5, 3)]  # fmt: skip
    with opened(f"{http.url}/dense.pt") as file:
        http.reset_counts()
        with file.planned(plan):
            got = [file.read_at(offset, length) for offset, length in reads]
            held = sum(len(b) for plan in file._plans for b in plan.loaded.values())
        counts = dict(http.kinds)
    assert got == [data[offset : offset + length] for offset, length in reads]
    assert held <= 20_000
    # the run's windows of about 9,000 bytes up to 270,000 (8: a request each, two at a time), the lone range, the
    # read before the run, the rest of the read past the lone range's 4 bytes, the read outside any plan, the tail
    # (the read past the end asks nothing)
    assert counts == {"GET range": 8 + 1 + 1 + 1 + 1 + 1}


def test_a_lone_sharded_index_sizes_each_shard_once(root, http, s3):
    """A sharded set's index by its URL (no listing): the index and each shard it names are sized by one request
    each (the one that finds the shard there also sizes it) and read in one GET each (all smaller than WHOLE)."""
    got = answers(root, http, s3, None, "sharded/model.safetensors.index.json", "--report", "--quick", "--format",
                  "json")  # fmt: skip
    assert got == {"http": {"HEAD": 1 + 2, "GET range": 1 + 2}, "s3": {"HEAD": 1 + 2, "GET": 1 + 2}}


def test_a_failed_read_among_many_side_by_side_names_its_own_object(http):
    """The rank files' reads go out in one batch; when one fails (a file removed after it was listed and sized),
    the one-line error names that file, not the batch's first."""
    http.gone.add("dcp-large/__2_0.distcp")
    try:
        proc = run_cli_process("--report", "--quick", f"{http.url}/dcp-large/")
    finally:
        http.gone.clear()
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"ckinspect: {http.url}/dcp-large/__2_0.distcp: not found (no such object)\n"
