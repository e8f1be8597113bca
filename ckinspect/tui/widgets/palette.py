"""Colours that read on both the dark and the light theme (groups, severities, diff status)."""

GROUP_COLOURS = {"model": "#4f8ff7", "optimizer": "#e8a33d", "rng": "#3bb58a", "other": "#a87fe0"}
SEVERITY_COLOURS = {"error": "#e5484d", "warning": "#e8a33d", "info": "#4f8ff7", "ok": "#3bb58a"}
STATUS_COLOURS = {
    "same": "",
    "changed": "#e8a33d",
    "only in A": "#e5484d",
    "only in B": "#3bb58a",
    "shape changed": "#d6409f",
    "dtype changed": "#d6409f",
    "comparing": "",
    "unreadable": "#e5484d",
}
