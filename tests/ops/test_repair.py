"""Planning and applying repairs: each interrupted-save scenario from real torch files.
(The `ckinspect repair` command itself: tests/commands/test_repair.py.)"""

from __future__ import annotations

import torch

from ckinspect.ops.repair import apply_plan, plan_repairs
from tests.helpers.torch_files import cut, save_resume, sha


def test_done_when_intact_main_and_partial_tmp_main_untouched_tmp_set_aside(tmp_path):
    main = save_resume(tmp_path / "tiny_resume.pth", step=30)
    tmp = cut(save_resume(tmp_path / "tiny_resume.pth.tmp", step=60, seed=3), 0.4)
    main_hash, tmp_hash = sha(main), sha(tmp)
    plan = plan_repairs(tmp_path)
    assert [a.action for a in plan.actions] == ["set-aside"]
    result = apply_plan(plan)
    assert sha(main) == main_hash and not tmp.exists()
    kept = result.quarantines[0] / "tiny_resume.pth.tmp"
    assert sha(kept) == tmp_hash  # set aside, not deleted


def test_both_whole_and_tmp_newer_promotes_and_keeps_the_old_main(tmp_path):
    main = save_resume(tmp_path / "r.pth", step=30, seed=1)
    tmp = save_resume(tmp_path / "r.pth.tmp", step=60, seed=2)
    old, new = sha(main), sha(tmp)
    plan = plan_repairs(tmp_path)
    assert [a.action for a in plan.actions] == ["promote-keep-old"]
    result = apply_plan(plan)
    assert sha(main) == new and not tmp.exists()
    assert sha(result.quarantines[0] / "r.pth") == old


def test_stale_tmp_is_set_aside_and_missing_main_is_promoted(tmp_path):
    save_resume(tmp_path / "a.pth", step=60)
    save_resume(tmp_path / "a.pth.tmp", step=30, seed=4)
    save_resume(tmp_path / ".b.pth.x1y2z3.tmp", step=10)
    plan = {a.leftover.tmp.name: a for a in plan_repairs(tmp_path).actions}
    assert plan["a.pth.tmp"].action == "set-aside" and "stale" in plan["a.pth.tmp"].reason
    assert plan[".b.pth.x1y2z3.tmp"].action == "promote"
    apply_plan(plan_repairs(tmp_path))
    assert torch.load(tmp_path / "b.pth", weights_only=True)["step"] == 10


def test_naming_a_main_file_that_is_missing_still_finds_its_tmp(tmp_path):
    tmp = save_resume(tmp_path / "ckpt.pt.tmp", step=3)
    whole = sha(tmp)
    plan = plan_repairs(tmp_path / "ckpt.pt")
    assert [a.action for a in plan.actions] == ["promote"]
    apply_plan(plan)
    assert sha(tmp_path / "ckpt.pt") == whole


def test_apply_refuses_a_file_that_changed_after_planning(tmp_path):
    save_resume(tmp_path / "r.pth", step=1)
    tmp = cut(save_resume(tmp_path / "r.pth.tmp", step=2), 0.5)
    plan = plan_repairs(tmp_path)
    tmp.write_bytes(tmp.read_bytes() + b"more")  # a writer is still at it
    apply_plan(plan)
    assert plan.actions[0].state == "skipped" and tmp.exists()


def test_dcp_folder_whose_metadata_was_never_renamed_gets_it_promoted(tmp_path):
    import warnings

    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save({"model": {"w": torch.randn(4, 4)}, "step": 5}, checkpoint_id=str(tmp_path / "ckpt"))
    folder = tmp_path / "ckpt"
    whole = (folder / ".metadata").read_bytes()
    (folder / ".metadata").rename(folder / ".metadata.tmp")  # killed between the write and the rename
    plan = plan_repairs(tmp_path)
    assert [(a.action, a.leftover.main.name) for a in plan.actions] == [("promote", ".metadata")]
    apply_plan(plan)
    assert (folder / ".metadata").read_bytes() == whole and not (folder / ".metadata.tmp").exists()
    # a second save died mid-way through its metadata: the whole one stays, the partial is set aside
    (folder / ".metadata.tmp").write_bytes(whole[: len(whole) // 2])
    assert [a.action for a in plan_repairs(folder).actions] == ["set-aside"]
    # the whole index beside a data file cut short: neither index reads whole, so nothing is promoted
    data = next(folder.glob("*.distcp"))
    data.write_bytes(data.read_bytes()[:100])
    (folder / ".metadata.tmp").write_bytes(whole)
    [action] = plan_repairs(folder).actions
    status = action.status
    assert not status.main_intact and "truncated" in status.main_problem
    assert not status.tmp_complete and "truncated" in status.tmp_problem
    assert action.action == "nothing"


def test_a_tmp_whose_big_storage_fails_its_crc_is_not_promoted(tmp_path):
    big = torch.arange(300_000, dtype=torch.float32)  # a member above the quick-check size limit
    torch.save({"w": big, "step": 9}, tmp_path / "r.pth.tmp")
    data = bytearray((tmp_path / "r.pth.tmp").read_bytes())
    data[len(data) // 2] ^= 0x40
    (tmp_path / "r.pth.tmp").write_bytes(bytes(data))
    plan = plan_repairs(tmp_path)
    assert plan.actions[0].action == "nothing" and "CRC" in plan.actions[0].status.explain()


def test_several_tmps_for_one_main_promote_only_the_newest(tmp_path):
    main = cut(save_resume(tmp_path / "r.pth", step=10), 0.5)
    save_resume(tmp_path / "r.pth.tmp", step=20, seed=1)
    newest = save_resume(tmp_path / ".r.pth.abc123.tmp", step=30, seed=2)
    cut(save_resume(tmp_path / ".r.pth.zzz999.tmp", step=40, seed=3), 0.3)
    newest_hash = sha(newest)
    plan = {a.leftover.tmp.name: a.action for a in plan_repairs(tmp_path).actions}
    assert plan == {"r.pth.tmp": "set-aside", ".r.pth.abc123.tmp": "promote", ".r.pth.zzz999.tmp": "set-aside"}
    apply_plan(plan_repairs(tmp_path))
    assert sha(main) == newest_hash and not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))
