"""What each finding code means, in words: the one home of the texts SARIF rules (and anything else
that explains a code) show. Severities stay in vocab; a code added there gets its texts here (a test
holds the two together)."""

from __future__ import annotations

from ckinspect.vocab import DIFF_CODES, SEVERITY


class RuleText:
    __slots__ = ("short", "help", "tags")

    def __init__(self, short: str, help: str, tags: tuple[str, ...] = ()) -> None:
        self.short = short  # one line: what was found
        self.help = help  # what it means and what to do
        self.tags = tags


RULE_TEXTS: dict[str, RuleText] = {
    "UNSAFE_PICKLE": RuleText(
        "The pickle names globals that can run code when it is loaded",
        "torch.load(weights_only=False) or pickle.load on this file would call the globals named in the message "
        "(os.system, builtins.exec, subprocess, ...). ckinspect listed them without executing anything. Do not "
        "load the file unless you trust where it comes from; re-save it from a trusted process as safetensors.",
        ("security",),
    ),
    "ALLOWLIST_NEEDED": RuleText(
        "Only benign globals, but some are outside torch's default weights_only allowlist",
        "torch.load(weights_only=True) refuses this file until the named globals (numpy arrays and dtypes in "
        "RNG state, ...) are allowed with torch.serialization.add_safe_globals or the safe_globals context.",
    ),
    "WEIGHTS_ONLY_REFUSED": RuleText(
        "torch's weights_only loader would refuse this safe file for want of pickle opcodes",
        "The pickle uses opcodes torch's weights_only unpickler does not implement (pickle protocols other than "
        "2: FRAME, MEMOIZE, SHORT_BINUNICODE, BINBYTES ...), so torch.load(weights_only=True) fails although "
        "nothing in it is unsafe. Load it with weights_only=False only if you trust where it comes from, or "
        "re-save it with pickle protocol 2 (torch.save's default).",
    ),
    "CORRUPT": RuleText(
        "The checkpoint cannot be read whole",
        "The file is truncated, its zip directory is missing or damaged, a CRC does not match, a safetensors "
        "header is bad, a DCP folder lacks .metadata, or it is not a checkpoint at all (the message says what "
        "it looks like). Restore it from a good copy; `ckinspect salvage` recovers the tensors that are whole.",
    ),
    "LEFTOVER_TMP": RuleText(
        "An interrupted save left a temporary file beside a checkpoint",
        "A save died between writing the .tmp and renaming it. The message says whether the tmp is complete "
        "and the main file intact. `ckinspect repair PATH` shows the plan; `--apply` carries it out (nothing "
        "is deleted; `--undo` restores).",
    ),
    "NONFINITE": RuleText(
        "NaN or Inf values in a floating tensor",
        "Training diverged or a save went wrong: resuming from this checkpoint propagates the NaN/Inf. Go back "
        "to an earlier checkpoint; the message names the tensors and counts.",
    ),
    "FP16_OVERFLOW": RuleText(
        "Values beyond float16's range (|x| > 65504)",
        "Saving or running these tensors in float16 turns the named values into inf. Keep them in float32 or "
        "use bfloat16.",
    ),
    "RESUME_INCOMPLETE": RuleText(
        "A resume file lacks optimizer state, the step counter or RNG/data-position state",
        "Resuming from it cannot continue the run as it would have gone: the message names what is missing. "
        "Save the optimizer's state_dict, the step and every RNG state with the weights.",
    ),
    "HALF_PRECISION_RESUME": RuleText(
        "A resume file whose master weights are float16/bfloat16",
        "A run resumed from half-precision master weights cannot match an uninterrupted one bit for bit. Keep "
        "float32 master weights in resume files; save half precision only for inference.",
    ),
    "OPTIMIZER_MISMATCH": RuleText(
        "The optimizer state does not match the parameters",
        "The number or shapes of the optimizer's per-parameter states differ from the model's parameters: "
        "optimizer.load_state_dict fails or, worse, pairs moments with the wrong weights.",
    ),
    "STORAGE_BLOAT": RuleText(
        "The file carries storage bytes that no tensor uses",
        "Views of large tensors were saved with their whole storage. Save .clone()d tensors (or safetensors) "
        "to drop the unused bytes; the message says how many.",
    ),
    "MISSING_PARTS": RuleText(
        "A checkpoint made of several files lacks some that its own records promise",
        "Rank files, shards named by an index, DCP data files or the tag a `latest` pointer names are missing: "
        "the checkpoint cannot be loaded whole. The message names them.",
    ),
    "PARTS_DISAGREE": RuleText(
        "The parts of one checkpoint disagree",
        "Step, world size or shapes differ across the files of one checkpoint: they come from different saves.",
    ),
    "EMBEDDED_CODE": RuleText(
        "The archive carries code that runs when the model is used",
        "A TorchScript archive holds code (code/ members) that runs when the model is loaded with "
        "torch.jit.load and called. Listing it ran nothing; review the code before using the model.",
        ("security",),
    ),
    "CRC_NOT_RECORDED": RuleText(
        "The archive records no CRC-32s, so its bytes cannot be checked against them",
        "torch.save wrote every CRC-32 as 0 (torch.utils.serialization.config.save.compute_crc32 = False). torch "
        "loads such a file; ckinspect still scans its values but cannot tell bytes changed on disk from the "
        "saved ones. Save with compute_crc32 left on (the default) to make damage detectable.",
        ("integrity",),
    ),
    "BOOKKEEPING_SENTINEL": RuleText(
        "A framework's bookkeeping value holds inf or NaN by design",
        "A value the framework keeps about the run, not one training computes (Lightning ModelCheckpoint's "
        "`kth_value`, EarlyStopping's `best_score`, ReduceLROnPlateau's `best`), starts at inf or -inf until a "
        "monitored score replaces it. Recognised by where it sits in the framework's layout: no damage.",
    ),
    "DUPLICATE_STORAGE": RuleText(
        "Equal tensors saved in separate storages",
        "Two or more tensors hold byte-for-byte equal values in separate storages (a tied embedding copied by "
        "`{k: v.half() for k, v in state_dict.items()}`). Saving them tied, as one storage, saves the bytes "
        "the message names; loading may need the tie restored.",
    ),
    "WRITTEN_AFTER_COMMIT": RuleText(
        "A data file of a save was modified after the save's commit marker",
        "A save writes its data files first and its commit marker last (DCP's .metadata, HF's "
        "trainer_state.json). A data file newer than the marker was rewritten after the save committed (a "
        "resumed run saving the same step again, one rank at a time): the marker may describe other bytes. "
        "Not a resume point; resume from an older checkpoint or save again.",
    ),
    "MIXED_RUN": RuleText(
        "A checkpoint of another run, whose model shapes differ from the run's newest",
        "The folder holds checkpoints of two runs (a restart with another model overwrote some saves). The "
        "current model cannot load this one; last-good does not cross from one run to the other.",
    ),
    "WEIGHTS_DIFFER": RuleText(
        "The weights file beside a resume file holds other weights than the resume file's model",
        "The bundled trainer and MiniMind save `<name>_resume.pth` and `<name>.pth` one after the other; a "
        "kill between the two saves leaves the weights file of another step. Compared value for value (the "
        "resume model rounded as the saver rounds it); the message says which file is newer. Resume from the "
        "resume file; take inference weights from it, or save again.",
    ),
    "SALVAGED_PARTIAL": RuleText(
        "A salvaged file that records what its salvage could not recover",
        "`ckinspect salvage` wrote the tensors and values it could recover from a damaged file and recorded the "
        "rest (a torch file's top-level `ckinspect_salvage`, a safetensors header's `salvage_missing`): the file "
        "is not the whole checkpoint. Resume from an intact checkpoint; load this one only knowing what it lacks.",
    ),
    "UPDATE_RATIO_OUTLIER": RuleText(
        "An update between two saves far outside the run's own history",
        "`ckinspect watch` measured ||Δw||/||w|| per step for the model or the optimizer state more than 10x "
        "above or below the median of the run's latest saves: a loss spike, a learning-rate or scaling bug, or "
        "a save of other weights. Compare this save with the one before (`ckinspect diff`).",
    ),
    "LAYER_FROZEN": RuleText(
        "A layer stopped changing between two saves",
        "Every fp32/fp64 tensor of the layer is bit-identical to the previous save, though it changed the save "
        "before: it was frozen, dropped from the optimizer, or its gradients are zero. The finding names it.",
    ),
    "NONFINITE_ONSET": RuleText(
        "The first checkpoint of the run holding NaN or Inf",
        "Every earlier save `ckinspect watch` judged was finite: training diverged between that save and this "
        "one, whose step the message names. Resume from the save before it, with a lower learning rate.",
    ),
    "TENSOR_CHANGED": RuleText(
        "A tensor differs between the two checkpoints",
        "Values, shape or dtype differ (beyond --atol); the message gives the largest difference.",
    ),
    "TENSOR_ONLY_IN_A": RuleText(
        "A tensor is only in the first checkpoint",
        "The second checkpoint has no tensor of this name (after name matching).",
    ),
    "TENSOR_ONLY_IN_B": RuleText(
        "A tensor is only in the second checkpoint",
        "The first checkpoint has no tensor of this name (after name matching).",
    ),
    "METADATA_CHANGED": RuleText(
        "Step, epoch or world size differ between the two checkpoints",
        "The message gives both values.",
    ),
    "TENSOR_UNREADABLE": RuleText(
        "A tensor could not be read, so no verdict on it is possible",
        "Its bytes are missing or damaged in one of the files; `ckinspect --report` on that file says why.",
    ),
}


def all_codes() -> dict[str, str]:
    """Every code a finding or a diff can carry, with its severity."""
    return {**SEVERITY, **DIFF_CODES}


def rule_text(code: str) -> RuleText:
    """The texts of a code; a code without its own (a bug the tests catch) still gets a usable rule."""
    return RULE_TEXTS.get(code) or RuleText(
        code.replace("_", " ").capitalize(), f"See README's findings table: {code}."
    )
