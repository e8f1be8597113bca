"""The one home of the names every layer shares: groups, finding codes and severities, exit statuses,
format tags, file suffixes, and the keys that known checkpoint layouts use.

Plain data and one exception class: importing it costs nothing and pulls in nothing.
"""

from __future__ import annotations

from enum import Enum

# The package's version: pyproject.toml reads it from here; --version and JSON reports print it.
VERSION = "0.1.0"


class CkinspectError(Exception):
    """A usage or environment problem the user can act on: the CLI prints it as one line and exits 2.
    The root of every exception ckinspect raises (the Python API's included: ckinspect.api)."""


class InternalError(CkinspectError):
    """A bug of ours met by a Python API call; the original exception is its __cause__."""


class StrEnum(str, Enum):
    """A str whose value is the JSON text: members compare, hash, print and serialise as their value
    (enum.StrEnum from Python 3.11, kept here while 3.10 is supported)."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, format_spec: str) -> str:
        return str.__format__(str.__str__(self), format_spec)


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class Verdict(StrEnum):
    """A run's checkpoint, judged (analysis.runs)."""

    GOOD = "good"
    INCOMPLETE = "incomplete"  # parts its records promise are missing, or the save never finished
    DAMAGED = "damaged"  # a part cannot be read whole, or the parts disagree
    UNSAFE = "unsafe"  # a part the framework loads names code-running globals
    NOT_RESUMABLE = "not-resumable"  # weights only, or resume state missing (RESUME_INCOMPLETE)


# A run's checkpoint the answer did not need: older than the one named (last-good's listing without --all).
# Not a Verdict: nothing was judged, so nothing is said about it.
NOT_JUDGED = "not-judged"


class RepairKind(StrEnum):
    """What repair does with one leftover temporary (ops.repair)."""

    PROMOTE = "promote"
    PROMOTE_KEEP_OLD = "promote-keep-old"
    SET_ASIDE = "set-aside"
    NOTHING = "nothing"


class GlobalKind(StrEnum):
    """What a global a pickle names is (formats.pickle_scan.classify_global)."""

    ALLOWED = "allowed"  # in torch's default weights_only set
    BENIGN = "benign"  # only builds data, outside that set
    UNSAFE = "unsafe"  # can run code (or unknown)
    TORCHSCRIPT = "torchscript"  # resolved by torch.jit.load inside a TorchScript archive


# Exit statuses of every command (the CLI contract; README, "Using it").
EXIT_OK = 0  # nothing at or above --fail-on; diff: identical
EXIT_FINDINGS = 1  # findings at or above --fail-on; diff: different
EXIT_ERROR = 2  # usage or internal error; diff: no honest verdict possible
SAME_STRUCTURE = "same structure"  # diff --quick's verdict when nothing it compares differs (exits EXIT_OK)

GROUPS: tuple[str, ...] = ("model", "optimizer", "rng", "other")

# Finding codes are a stable contract (README's findings table); the severity is fixed per code.
SEVERITY: dict[str, Severity] = {
    "UNSAFE_PICKLE": Severity.ERROR,
    "ALLOWLIST_NEEDED": Severity.WARNING,
    "WEIGHTS_ONLY_REFUSED": Severity.WARNING,
    "CORRUPT": Severity.ERROR,
    "LEFTOVER_TMP": Severity.WARNING,
    "NONFINITE": Severity.ERROR,
    "FP16_OVERFLOW": Severity.WARNING,
    "RESUME_INCOMPLETE": Severity.WARNING,
    "HALF_PRECISION_RESUME": Severity.WARNING,
    "OPTIMIZER_MISMATCH": Severity.ERROR,
    "STORAGE_BLOAT": Severity.WARNING,
    "MISSING_PARTS": Severity.ERROR,
    "PARTS_DISAGREE": Severity.ERROR,
    "EMBEDDED_CODE": Severity.WARNING,
    # torch.save under compute_crc32=False: every CRC-32 is 0, the bytes cannot be checked
    "CRC_NOT_RECORDED": Severity.INFO,
    "BOOKKEEPING_SENTINEL": Severity.INFO,
    "DUPLICATE_STORAGE": Severity.INFO,
    "WRITTEN_AFTER_COMMIT": Severity.WARNING,
    "MIXED_RUN": Severity.ERROR,
    "WEIGHTS_DIFFER": Severity.WARNING,  # the weights file beside a resume file holds another step's weights
    "SALVAGED_PARTIAL": Severity.ERROR,  # a salvage output that records tensors or values it could not recover
    # `ckinspect watch`: anomalies between the saves of one run
    "UPDATE_RATIO_OUTLIER": Severity.WARNING,
    "LAYER_FROZEN": Severity.WARNING,
    "NONFINITE_ONSET": Severity.ERROR,
}
# What `ckinspect diff` finds, named like finding codes so SARIF and JUnit can carry it. Not findings about one
# checkpoint (so not in SEVERITY or the JSON report's findings): a difference fails a diff as its exit 1 does.
DIFF_CODES: dict[str, Severity] = {
    "TENSOR_CHANGED": Severity.ERROR,
    "TENSOR_ONLY_IN_A": Severity.ERROR,
    "TENSOR_ONLY_IN_B": Severity.ERROR,
    "METADATA_CHANGED": Severity.ERROR,
    "TENSOR_UNREADABLE": Severity.ERROR,
}
# Codes that say a checkpoint cannot be read whole: a damaged file, or a part its own records name is not there.
NOT_WHOLE_CODES = ("CORRUPT", "MISSING_PARTS")
SEVERITY_RANK: dict[str, int] = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2}
FAIL_ON_CHOICES = ("error", "warning", "never")
# --format of the commands that report findings; sarif and junit are for CI (code scanning, test dashboards)
REPORT_FORMATS = ("text", "json", "markdown", "sarif", "junit")

# Format tags of the JSON report's `format` field.
FORMAT_TAGS = (
    "torch-zip",
    "torch-legacy",
    "torchscript",
    "safetensors",
    "sharded",
    "dcp",
    "pickle",
    "numpy",
    "unknown",
)
SINGLE_FILE_FORMATS = ("torch-zip", "torch-legacy", "torchscript", "safetensors", "pickle", "numpy")

# The bundled trainer writes this tag into every file it saves (`format` key).
TRAINER_FORMAT = "ckinspect-trainer/1"
TRAINER_FORMAT_PREFIX = "ckinspect-trainer/"

# Interrupted saves: `<name>.tmp` beside `<name>`; repair sets aside into this folder.
TMP_SUFFIX = ".tmp"
SALVAGE_KEY = "ckinspect_salvage"  # what `salvage` lost, recorded at the top of a torch output it writes
RESUME_SUFFIX = "_resume"  # `<name>_resume.pth` beside `<name>.pth` (the bundled trainer, MiniMind)
QUARANTINE_DIR = ".ckinspect-quarantine"
DCP_METADATA = ".metadata"

# The one table of the suffixes a checkpoint file may have, a column per use:
#   found   discovery takes a file with it as a checkpoint by its name (others only when their content sniffs
#           as one; a `.tar` is mostly just an archive, a `.distcp` belongs to its DCP folder)
#   paired  a `<stem>.tmp` beside `<stem><suffix>` is that file's interrupted save (leftovers, repair)
#   named   `--checkpoints-only` judges a file by this name alone, whatever it holds (a damaged `.pt` is CORRUPT)
# (.jit: TorchScript archives; .p / .joblib: pickles; .npy / .npz: NumPy)
#                suffix          found  paired named
SUFFIX_TABLE: tuple[tuple[str, bool, bool, bool], ...] = (
    (".pt", True, True, True),
    (".pth", True, True, True),
    (".bin", True, True, True),
    (".ckpt", True, True, True),
    (".safetensors", True, True, True),
    (".pkl", True, True, True),
    (".pickle", True, True, True),
    (".tar", False, True, False),
    (".distcp", False, True, True),
    (".jit", True, True, False),
    (".p", True, True, False),
    (".joblib", True, True, False),
    (".npy", True, True, False),
    (".npz", True, True, False),
)
CHECKPOINT_SUFFIXES = tuple(row[0] for row in SUFFIX_TABLE)
FOUND_SUFFIXES = frozenset(suffix for suffix, found, _, _ in SUFFIX_TABLE if found)
PAIRED_SUFFIXES = tuple(suffix for suffix, _, paired, _ in SUFFIX_TABLE if paired)
NAMED_SUFFIXES = frozenset(suffix for suffix, _, _, named in SUFFIX_TABLE if named)
INDEX_SUFFIX = ".index.json"  # a sharded set's index: `model.safetensors.index.json`

# The containers trainers keep the model's and the optimizer's state under: dotted-path components that name a
# role wherever they appear (`app.optim.state...` in DCP too). Layouts, diff and checks all read these.
MODEL_KEYS = frozenset(
    {
        "model",
        "module",
        "state_dict",
        "model_state_dict",
        "model_state",
        "net",
        "network",
        "weights",
        "params",
        "ema",
        "model_ema",
        "ema_model",
        "ema_state_dict",
    }
)
OPTIMIZER_KEYS = frozenset(
    {
        "optimizer",
        "optimizers",
        "optim",
        "opt",
        "optimizer_state",
        "optimizer_states",
        "optimizer_state_dict",
        "optim_state",
        "optim_state_dict",
        "opt_state",
    }
)
# Hugging Face Trainer's own files: its state (written last, the save's commit mark) and its RNG files, one
# per process (`rng_state.pth` alone, `rng_state_K.pth` each); formats, layouts and runs share the spelling.
HF_TRAINER_STATE = "trainer_state.json"
HF_RNG_STATE = r"^rng_state(?:_(\d+))?\.pth$"

# Top-level keys where known layouts keep the step counter, the epoch and the number of processes.
STEP_KEYS = (
    "step",
    "global_step",
    "iter_num",
    "iteration",
    "iter",
    "steps",
    "num_steps",
    "total_steps",
    "num_updates",
)
EPOCH_KEYS = ("epoch", "epochs", "cur_epoch", "current_epoch")
WORLD_SIZE_KEYS = ("world_size", "num_processes", "n_gpus", "ngpus")

# `watch --keep`: MiB of one save's weights and moments kept for the comparison with the next save
WATCH_KEEP_MIB = 256
FP16_MAX = 65504.0  # the largest finite float16; beyond it a half-precision save stores inf

# Logit drift: the reference the roundings are measured against, the formats measured by default, and
# the fp8 formats measured when asked (`drift --fp8`; simulated with per-tensor scaling).
REFERENCE_FORMAT = "fp32"
LOGIT_FORMATS = ("fp16", "bf16")
FP8_FORMATS = ("fp8_e4m3fn", "fp8_e5m2")
# The files that hold a Hugging Face model's weights beside its config.json, in the order they are preferred.
HF_CONFIG = "config.json"
HF_WEIGHTS = ("model.safetensors.index.json", "model.safetensors", "pytorch_model.bin.index.json", "pytorch_model.bin")
