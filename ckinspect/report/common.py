"""Pieces the text and Markdown renderers share (no rich here, so Markdown and JSON never load it)."""

from __future__ import annotations

from collections.abc import Mapping

from ckinspect.fmt import human_bytes, shape_text, terminal_safe

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Show every tensor up to this many; beyond it only the largest few (the JSON report has them all).
ALL_TENSORS_UP_TO = 30
LARGEST_SHOWN = 12
# Metadata the one-line summary leaves to the JSON report: shown elsewhere, or of no use to a reader.
NOT_SHOWN = frozenset({"step", "epoch", "world_size", "config", "train_config", "format", "byteorder"})


def largest(tensors: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The LARGEST_SHOWN tensor entries with the most bytes, largest first."""
    import heapq

    return heapq.nlargest(LARGEST_SHOWN, tensors, key=lambda t: t["bytes"])


RAGGED_TEXT = "j"  # a nested tensor's ragged dimension (null in JSON), as torch prints it (j1, j2 ...)


def composite_rows(entry: Mapping[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    """(name, kind, dtype, logical shape, size, parts) of each composite tensor (sparse, nested, jagged, meta,
    per-channel quantized, a wrapper subclass such as a DTensor): the whole, beside its parts in the tensor
    table; a meta tensor (no parts) is seen only here. The first ALL_TENSORS_UP_TO, as the JSON has them all."""
    rows = []
    for c in entry.get("composite_tensors", [])[:ALL_TENSORS_UP_TO]:
        kind = c["layout"] if not c.get("subclass") else f"{c['subclass'].rsplit('.', 1)[-1]} ({c['layout']})"
        shape = "×".join(RAGGED_TEXT if n is None else str(n) for n in c["shape"]) or shape_text(())
        parts = ", ".join(c["parts"]) or "no data"
        rows.append((c["name"], kind, c["dtype"], shape, human_bytes(c["bytes"]), parts))
    return rows


def optimizer_share(entry: Mapping[str, Any]) -> float:
    """The share to quote for a file: of the declared sizes when it is cut short (what survived says
    little about what it held), else of its tensor bytes."""
    short = entry.get("cut_short")
    return float(short["declared_optimizer_share"] if short else entry["optimizer_share"])


def metadata_line(metadata: Mapping[str, Any]) -> str:
    shown = [f"{key} {metadata[key]}" for key in ("step", "epoch", "world_size") if metadata.get(key) is not None]
    shown += [text for key, value in metadata.items() if key not in NOT_SHOWN and (text := _scalar(key, value))]
    config = metadata.get("config")
    if isinstance(config, Mapping) and config:
        shown.append(_config_text(config))
    return " · ".join(shown)


def _config_text(config: Mapping[str, Any]) -> str:
    """The model config's first six plain values (`config: dim=64, n_layers=2, ...`)."""
    items = ", ".join(f"{k}={v}" for k, v in list(config.items())[:6] if not isinstance(v, (dict, list)))
    return f"config: {items}{', ...' if len(config) > 6 else ''}"


def _scalar(key: str, value: Any) -> str:
    """`key value` for a float (6 significant digits), an int or a short string; "" for anything else."""
    if isinstance(value, float):
        return f"{key} {value:.6g}"
    if isinstance(value, (int, str)) and not isinstance(value, bool) and len(str(value)) <= 40:
        return f"{key} {value}"
    return ""


def finding_counts(findings: list[Mapping[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for finding in findings:
        counts[finding["severity"]] = counts.get(finding["severity"], 0) + 1
    return ", ".join(_plural(counts[s], s) for s in ("error", "warning", "info") if s in counts)


def summary_line(summary: Mapping[str, int]) -> str:
    parts = [_plural(summary["files"], "checkpoint")]
    found = [_plural(summary[k], k[:-1]) for k in ("errors", "warnings", "infos") if summary[k]]
    return f"{parts[0]}: {', '.join(found) if found else 'no findings'}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


_PLAIN = frozenset({int, float, bool, type(None)})  # what terminal_copy returns as it is


def terminal_copy(value: Any) -> Any:
    """A copy of a report's data with every string made terminal-safe (fmt.terminal_safe), keys included.

    Each container is copied once by identity, so data a pickle shares a billion times over (its memo
    can) stays as small as it was; nesting past 64 levels is cut, as no report goes that deep."""
    copies: dict[int, Any] = {}

    def copy(node: Any, depth: int) -> Any:
        kind = type(node)
        if kind is str:  # most of a report: a plain name or word, already safe (terminal_safe's own test)
            return node if node.isascii() and node.isprintable() else terminal_safe(node)
        if kind in _PLAIN:
            return node
        if isinstance(node, str):
            return terminal_safe(node)
        if not (kind is dict or kind is list or isinstance(node, (Mapping, list, tuple))):
            return node
        done = copies.get(id(node))
        if done is not None:
            return done
        if depth > 64:
            return "…"
        if isinstance(node, Mapping):
            out: Any = {}
            copies[id(node)] = out
            for key, item in node.items():
                out[terminal_safe(key) if isinstance(key, str) else key] = copy(item, depth + 1)
            return out
        items: list[Any] = []
        copies[id(node)] = items
        items.extend([copy(item, depth + 1) for item in node])
        return items

    return copy(value, 0)
